"""The Triton source of :mod:`.fused`'s multi-tensor AdamW kernel (imported only where Triton is installed; see
:mod:`.fused` for the layout and the arithmetic)."""

import triton
import triton.language as tl


@triton.jit
def widen_bf16(x):
    """bf16 -> fp32, exact (subnormals included)."""
    return (x.to(tl.int16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True)


@triton.jit
def round_bf16_rne(x):
    """fp32 -> bf16 bits, round to nearest even (torch's and the GPU's conversion; NaN -> 0x7FC0)."""
    u = x.to(tl.uint32, bitcast=True)
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    r = tl.where(x != x, 0x7FC0, r)
    return r.to(tl.uint16).to(tl.bfloat16, bitcast=True)


@triton.jit(do_not_specialize=["T"])
def adamw_multi_kernel(
    tab_ptr,
    bmap_ptr,
    bidx_ptr,
    w_ptr,
    m_ptr,
    v_ptr,
    z_ptr,
    scale_ptr,
    T,
    b1,
    omb1,
    b2,
    omb2,
    ibc1,
    ibc2,
    eps,
    wd,
    lr,
    MODE: tl.constexpr,
    WD: tl.constexpr,
    DECOUPLED: tl.constexpr,
    M_BF16: tl.constexpr,
    V_BF16: tl.constexpr,
    BLOCK: tl.constexpr,
    ALIGNED: tl.constexpr = False,
    FULL: tl.constexpr = False,
    GKIND: tl.constexpr = 0,
):
    pid = tl.program_id(0)
    t = tl.load(bmap_ptr + pid).to(tl.int64)  # the shard of this program
    j = tl.load(bidx_ptr + pid).to(tl.int64)  # its block within the shard
    paddr = tl.load(tab_ptr + t)
    gaddr = tl.load(tab_ptr + T + t)
    gkind = tl.load(tab_ptr + 2 * T + t)
    n = tl.load(tab_ptr + 3 * T + t)
    start = tl.load(tab_ptr + 4 * T + t)
    if ALIGNED:  # the host checked: addresses 16-byte aligned, starts multiples of 8 elements (vector accesses)
        paddr = tl.multiple_of(paddr, 16)
        gaddr = tl.multiple_of(gaddr, 16)
        start = tl.multiple_of(start, 8)
    loc = j * BLOCK + tl.arange(0, BLOCK)
    if FULL:  # a whole block: a mask constant over the block (the loads and stores can be vector accesses)
        mask = tl.full([BLOCK], 1, tl.int1)
    else:  # the shard's last, partial block (n is read from the table: its divisibility is unknown)
        mask = loc < n
    offs = start + loc
    clip = tl.load(scale_ptr)
    # per-program scalars broadcast to the block before they meet the masks (vector & vector only)
    apply = (tl.zeros([BLOCK], dtype=tl.float32) + tl.load(scale_ptr + 1)) != 0.0
    smask = mask & apply
    # ---- the fp32 master
    if MODE == 0:
        p_ptr = paddr.to(tl.pointer_type(tl.float32))
        if ALIGNED:
            p_ptr = tl.multiple_of(p_ptr, 16)
        p32 = tl.load(p_ptr + loc, mask=mask, other=0.0)
    else:
        p_ptr = paddr.to(tl.pointer_type(tl.bfloat16))
        if ALIGNED:
            p_ptr = tl.multiple_of(p_ptr, 16)
        if MODE == 1:
            p32 = tl.load(w_ptr + offs, mask=mask, other=0.0)
        else:  # merge: high = param_bits - (remainder < 0); bits = high * 65536 + (remainder & 0xFFFF)
            hi = tl.load(p_ptr + loc, mask=mask, other=0.0).to(tl.int16, bitcast=True).to(tl.int32)
            rem = tl.load(w_ptr + offs, mask=mask, other=0).to(tl.int32)
            neg = (rem < 0).to(tl.int32)
            hi = hi - neg
            hi = tl.where(hi < -32768, hi + 65536, hi)
            p32 = (hi * 65536 + (rem + neg * 65536)).to(tl.float32, bitcast=True)
    # ---- gradient of this shard + zero count: GKIND > 0 when every shard of the launch has a gradient of that
    # dtype (one load); 0: the dtype is per shard (the two other loads are masked off; no gradient: all three)
    gpb = gaddr.to(tl.pointer_type(tl.bfloat16))
    gpf = gaddr.to(tl.pointer_type(tl.float32))
    gph = gaddr.to(tl.pointer_type(tl.float16))
    if ALIGNED:
        gpb = tl.multiple_of(gpb, 16)
        gpf = tl.multiple_of(gpf, 16)
        gph = tl.multiple_of(gph, 16)
    if GKIND == 1:
        g = widen_bf16(tl.load(gpb + loc, mask=mask, other=0.0))
        gmask = mask
    elif GKIND == 2:
        g = tl.load(gpf + loc, mask=mask, other=0.0)
        gmask = mask
    elif GKIND == 3:
        g = tl.load(gph + loc, mask=mask, other=0.0).to(tl.float32)
        gmask = mask
    else:
        gk = tl.zeros([BLOCK], dtype=tl.int64) + gkind
        m1 = mask & (gk == 1)
        m2 = mask & (gk == 2)
        m3 = mask & (gk == 3)
        gb = widen_bf16(tl.load(gpb + loc, mask=m1, other=0.0))
        gf = tl.load(gpf + loc, mask=m2, other=0.0)
        gh = tl.load(gph + loc, mask=m3, other=0.0).to(tl.float32)
        g = tl.where(m1, gb, tl.where(m2, gf, tl.where(m3, gh, 0.0)))
        gmask = m1 | m2 | m3
    tl.store(z_ptr + pid, tl.sum(((g == 0.0) & gmask).to(tl.int32), axis=0))
    g = g * clip  # always (x * 1.0 == x exactly): no kernel variant appears when clipping starts or stops
    if WD and not DECOUPLED:
        g = g + p32 * wd
    # ---- moments and update (same order as adamw_inplace)
    if M_BF16:
        m = widen_bf16(tl.load(m_ptr + offs, mask=mask, other=0.0))
    else:
        m = tl.load(m_ptr + offs, mask=mask, other=0.0)
    if V_BF16:
        v = widen_bf16(tl.load(v_ptr + offs, mask=mask, other=0.0))
    else:
        v = tl.load(v_ptr + offs, mask=mask, other=0.0)
    m = m * b1 + g * omb1
    num = m * ibc1
    v = v * b2 + (g * g) * omb2
    den = tl.sqrt_rn(v * ibc2) + eps
    u = tl.div_rn(num, den)
    if WD and DECOUPLED:
        u = u + p32 * wd
    new = p32 - u * lr
    if M_BF16:
        tl.store(m_ptr + offs, round_bf16_rne(m), mask=smask)
    else:
        tl.store(m_ptr + offs, m, mask=smask)
    if V_BF16:
        tl.store(v_ptr + offs, round_bf16_rne(v), mask=smask)
    else:
        tl.store(v_ptr + offs, v, mask=smask)
    # ---- write back
    if MODE == 0:
        tl.store(p_ptr + loc, new, mask=smask)
    else:  # split: low >= 0x8000 rounds the high half up (ties away from zero); remainder = signed low half
        bits = new.to(tl.int32, bitcast=True)
        low = bits & 0xFFFF
        up = (low >= 0x8000).to(tl.int32)
        hi2 = (bits >> 16) + up
        hi2 = tl.where(hi2 > 32767, hi2 - 65536, hi2)
        tl.store(p_ptr + loc, hi2.to(tl.int16).to(tl.bfloat16, bitcast=True), mask=smask)
        if MODE == 1:
            tl.store(w_ptr + offs, new, mask=smask)
        else:
            tl.store(w_ptr + offs, (low - up * 65536).to(tl.int16), mask=smask)
