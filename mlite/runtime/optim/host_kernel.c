/* One-pass AdamW over a flat host range: the fused form of mlite.runtime.optim.host.update_chunk.
 *
 * Built by mlite/runtime/optim/host_fused.py with -O3 -ffp-contract=off (no fused multiply-add) and without
 * -ffast-math, so every operation below is one IEEE-rounded fp32 multiply, add, subtract, divide or square root,
 * in the order of mlite/runtime/optim/adamw.py (Transformer Engine FusedAdam's order). The bf16 parameter is
 * round_bf16 of the new master (ties away from zero: high half plus the low half's top bit, 16-bit wrap); bf16
 * moments are widened exactly and rounded to nearest even (c10::BFloat16's rule; NaN payloads are not matched:
 * a non-finite step is skipped before this runs). Threads: OpenMP, static schedule over the range.
 */
#include <stdint.h>
#include <string.h>
#include <math.h>

typedef struct {
    float clip, b1, omb1, b2, omb2, ibc1, ibc2, eps, wd, lr;
    int32_t decoupled;
} scalars_t;

enum { MODE_PARAM = 0, MODE_MASTER = 1, MODE_REMAINDER = 2 };
enum { GRAD_NONE = 0, GRAD_BF16 = 1, GRAD_F32 = 2 };

static inline float f_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t u_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float widen(uint16_t h) { return f_of((uint32_t)h << 16); }
static inline uint16_t bf16_rne(float f) {
    uint32_t u = u_of(f);
    if (f != f) return 0x7FC0;
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
/* round_bf16 of the master (mlite.runtime.optim.master.round_bf16): high + (low >= 0x8000), mod 2^16 */
static inline uint16_t bf16_away(uint32_t u) { return (uint16_t)((u >> 16) + ((u >> 15) & 1u)); }

static inline __attribute__((always_inline)) void run(
    const int mode, const int gk, const int mbf, const int vbf, int64_t lo, int64_t hi,
    void *restrict param, const void *restrict grad, float *restrict master, int16_t *restrict rem,
    void *restrict m_, void *restrict v_, const scalars_t s)
{
    const int do_clip = s.clip != 1.0f, l2 = !s.decoupled && s.wd != 0.0f, dwd = s.decoupled && s.wd != 0.0f;
    for (int64_t i = lo; i < hi; i++) {
        float p;
        if (mode == MODE_PARAM) p = ((float *)param)[i];
        else if (mode == MODE_MASTER) p = master[i];
        else {
            uint16_t r = (uint16_t)rem[i];
            uint16_t h = (uint16_t)(((uint16_t *)param)[i] - (r >> 15));
            p = f_of(((uint32_t)h << 16) | r);
        }
        float g = gk == GRAD_NONE ? 0.0f : gk == GRAD_BF16 ? widen(((const uint16_t *)grad)[i])
                                                           : ((const float *)grad)[i];
        if (do_clip) g = g * s.clip;
        if (l2) g = g + p * s.wd;
        float m = mbf ? widen(((uint16_t *)m_)[i]) : ((float *)m_)[i];
        m = m * s.b1;
        m = m + g * s.omb1;
        if (mbf) ((uint16_t *)m_)[i] = bf16_rne(m); else ((float *)m_)[i] = m;
        float num = m * s.ibc1;
        float gg = g * g;
        gg = gg * s.omb2;
        float v = vbf ? widen(((uint16_t *)v_)[i]) : ((float *)v_)[i];
        v = v * s.b2;
        v = v + gg;
        if (vbf) ((uint16_t *)v_)[i] = bf16_rne(v); else ((float *)v_)[i] = v;
        float den = sqrtf(v * s.ibc2);
        den = den + s.eps;
        float u = num / den;
        if (dwd) u = u + p * s.wd;
        u = u * s.lr;
        p = p - u;
        if (mode == MODE_PARAM) ((float *)param)[i] = p;
        else {
            uint32_t b = u_of(p);
            ((uint16_t *)param)[i] = bf16_away(b);
            if (mode == MODE_MASTER) master[i] = p;
            else rem[i] = (int16_t)(uint16_t)(b & 0xFFFFu);
        }
    }
}

#define CASE(MODE, GK, MB, VB)                                                                                     \
    case (((MODE) * 3 + (GK)) * 2 + (MB)) * 2 + (VB):                                                              \
        run(MODE, GK, MB, VB, lo, hi, param, grad, master, rem, m, v, *s);                                        \
        break;
#define CASES_MV(MODE, GK) CASE(MODE, GK, 0, 0) CASE(MODE, GK, 0, 1) CASE(MODE, GK, 1, 0) CASE(MODE, GK, 1, 1)
#define CASES_G(MODE) CASES_MV(MODE, 0) CASES_MV(MODE, 1) CASES_MV(MODE, 2)

static void dispatch(int key, int64_t lo, int64_t hi, void *param, const void *grad, float *master, int16_t *rem,
                     void *m, void *v, const scalars_t *s)
{
    switch (key) {
        CASES_G(MODE_PARAM)
        CASES_G(MODE_MASTER)
        CASES_G(MODE_REMAINDER)
    }
}

/* Update elements [0, n) of the given arrays in place; returns 0, or -1 for an unknown mode / dtype code. */
int mlite_adamw_host(int mode, int grad_kind, int m_bf16, int v_bf16, int64_t n, void *param, const void *grad,
                     float *master, int16_t *rem, void *m, void *v, const scalars_t *s, int threads)
{
    if (mode < 0 || mode > 2 || grad_kind < 0 || grad_kind > 2) return -1;
    const int key = ((mode * 3 + grad_kind) * 2 + (m_bf16 != 0)) * 2 + (v_bf16 != 0);
    const int64_t block = 1 << 15;
    const int64_t nblocks = (n + block - 1) / block;
    int t = threads < 1 ? 1 : threads;
    if (t > nblocks) t = (int)(nblocks > 0 ? nblocks : 1);
    if (t == 1) {
        dispatch(key, 0, n, param, grad, master, rem, m, v, s);
        return 0;
    }
#pragma omp parallel for schedule(static) num_threads(t)
    for (int64_t k = 0; k < nblocks; k++) {
        int64_t lo = k * block, hi = lo + block < n ? lo + block : n;
        dispatch(key, lo, hi, param, grad, master, rem, m, v, s);
    }
    return 0;
}
