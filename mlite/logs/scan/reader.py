"""The streaming reader: one pass over a log in large binary blocks, memory independent of the file size.

Which reader runs comes from the source's registry entry (:mod:`..formats.registry`), once per source: a
:class:`~..formats.registry.FileReader` (TensorBoard) with its own loader, a
:class:`~..formats.registry.LineReader` (JSONL, one record a line), or the console scan below for verl, Megatron-LM
and ``Step: N |`` lines.

Hot path: a block of complete lines is searched for a few byte strings (``step:`` and a digit for verl — with
numpy on large blocks, :mod:`..formats.npscan` —, ``iteration`` / ``validation loss at`` for Megatron,
:data:`..analysis.events.LINE_KEYWORDS` for failures; in a large plain file the failure keywords and the Megatron heads are
found beforehand by one ``grep -F`` pass, see :mod:`..input.prefilter`); only the lines that contain one are looked at.
Everything else — model generations, config dumps, tqdm bars, worker chatter — is skipped at C speed. A plain verl
metric line is queued and decoded with the block's others in one call (:mod:`..formats.fastverl`); any other line is decoded
(UTF-8, invalid bytes replaced) and parsed here. Line numbers come from counting newlines between hits. JSONL is
read line by line.

A line is *skipped* (``skipped_lines``) when it had the shape of a metric record (a ``step:N - `` head, a
Megatron ``iteration N/M |`` head, a non-blank JSONL line) but could not be parsed completely; the valid
``key:value`` parts of such a line are kept, and the records around it are unaffected.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ...errors import MliteError
from ..analysis.events import LINE_KEYWORDS, TracebackWalker, classify_line, fold
from ..analysis.series import SeriesWatch
from ..formats import fastverl, megatron, npscan, pipe, registry, verl_console
from ..input.blockio import blocks
from ..input.detect import LogSource, final_format, no_metrics_event
from ..input.prefilter import keyword_offsets
from ..input.source import head_text, open_binary
from ..input.text import clean, split_prefix, strip_ansi
from ..records import INTERRUPTION_KINDS, Event, StepRecord
from .store import RecordStore, ScanResult

_VERL, _ITER, _VAL, _PIPE, _TB, _RAY, _EVT = range(7)
_METRIC_KW = {_VERL: (b"step:",), _ITER: (b"iteration",), _VAL: (b"validation loss at",), _PIPE: (b"Step:",)}
_GRAMMARS = ((verl_console.CONSOLE, (_VERL,)), (megatron.CONSOLE, (_ITER, _VAL)), (pipe.CONSOLE, (_PIPE,)))
"""The console scan's line grammars (:class:`registry.ConsoleReader`) and the codes of their metric heads."""
_V, _M, _P = verl_console.NAME, megatron.NAME, pipe.NAME


def _decode_one(text) -> dict[str, float] | None:
    """One plain verl line through the batch decoder (None: the general parser reads it)."""
    r = fastverl.decode([text])
    return r[0] if r else None


def _keyword_hits(block: bytes, kws, skip_until: int, extra) -> list[tuple[int, int]]:
    """``(offset, code)`` of the keywords ``kws`` in ``block`` from ``skip_until`` on, with the ``extra`` hits found
    beforehand; unsorted."""
    hits: list[tuple[int, int]] = [h for h in extra if h[0] >= skip_until] if extra else []
    large = len(block) >= npscan.MIN_BYTES
    for kw, code in kws:
        if code == _VERL and large:
            hits.extend([(i, _VERL) for i in npscan.verl_heads(block, skip_until)])
        elif code == _VERL:
            _verl_hits(block, kw, skip_until, hits)
        else:
            _keyword_lines(block, kw, code, skip_until, hits)
    return hits


def _verl_hits(block: bytes, kw: bytes, start: int, hits: list[tuple[int, int]]) -> None:
    """A verl head is ``step:`` and a digit, one a line: prose (``step by step:``) is skipped unread."""
    find, n = block.find, len(block)
    i = find(kw, start)
    while i != -1:
        d = i + 5
        if d < n and 48 <= block[d] <= 57:
            hits.append((i, _VERL))
            j = find(b"\n", d)
            if j == -1:
                break
            i = find(kw, j)
        else:
            i = find(kw, d)


def _keyword_lines(block: bytes, kw: bytes, code: int, start: int, hits: list[tuple[int, int]]) -> None:
    """Every hit of ``kw``; one a line for a metric head (a code up to ``_PIPE``)."""
    find = block.find
    i = find(kw, start)
    while i != -1:
        hits.append((i, code))
        if code <= _PIPE:  # metric line: one hit per line is enough
            j = find(b"\n", i)
            if j == -1:
                break
            i = find(kw, j)
        else:
            i = find(kw, i + len(kw))


class _Scanner:
    def __init__(
        self,
        res: ScanResult,
        *,
        keep: bool,
        events: bool,
        series: bool,
        sink,
        progress,
        metrics=True,
        grammar: str = _V,
    ):
        self.res = res
        self.grammar = grammar
        """The sniffed console grammar: its heads are searched even when it is not searched ``always``."""
        self.store = res.store
        self.sink = sink
        self.want_events = events
        self.watch = SeriesWatch() if series else None
        self.track = events or keep
        self.count_lines = self.track or (sink is not None and getattr(sink, "needs_lines", True))
        self.want_metrics = metrics
        self.progress = progress
        self.last_step: int | None = None
        self.first_kind: str | None = None
        self.text_events: list[Event] = []
        self.walkers: list[TracebackWalker] = []
        self.pending_verl: tuple[str, int] | None = None
        self.pending_meg: tuple | None = None
        self.interrupts: list[Event] = []
        """Scheduler endings since the last record: metric records after them mean the job was requeued and
        resumed (see :meth:`resumed`)."""
        self.batch: list[tuple[int, int, int, int, int]] = []
        """Plain verl lines of the current block waiting for :mod:`fastverl`: ``(step, line, ls, body, le)``."""
        self.fast = fastverl.available()

    # -- records -----------------------------------------------------------------------------------------
    def emit(self, step: int, keys: list[str], vals: list[float], bad: bool, line: int, kind: str) -> None:
        if bad:
            self.res.skipped_lines += 1
        if not keys:
            return
        if self.first_kind is None:
            self.first_kind = kind
        if self.sink is not None:
            self.sink(step, keys, vals, line)
        self._account(step, keys, vals, line)

    def emit_dict(self, step: int, values: dict[str, float], line: int) -> None:
        """:meth:`emit` of a plain verl record decoded by :mod:`fastverl` (never malformed, never empty)."""
        if self.first_kind is None:
            self.first_kind = _V
        take = getattr(self.sink, "take_dict", None)
        if take is not None and self.store is None and not self.track and self.watch is None and not self.interrupts:
            take(step, values, line)  # iter_records: the dict is the record's, nothing else needs the lists
            self.last_step = step
            return
        keys, vals = list(values), list(values.values())
        if self.sink is not None:
            self.sink(step, keys, vals, line)
        self._account(step, keys, vals, line)

    def _account(self, step: int, keys: list[str], vals: list[float], line: int) -> None:
        if self.store is not None:
            self.store.add(step, keys, vals)
        if self.track:
            self.res.steps.add(step)
            known = self.res.metrics
            if not known.keys() >= set(keys):
                for k in keys:
                    known.setdefault(k, None)
        resumed = bool(self.interrupts) and self.resumed(step, line)
        if self.watch is not None:
            self.watch.update(step, keys, vals, line, resumed)
        self.last_step = step

    def resumed(self, step: int, line: int) -> bool:
        """Records follow a scheduler ending: one run, restarted. The first ending becomes the ``restart`` event
        (its wording kept), the others of the same gap (the job's and the step's line) fold into it."""
        first, *rest = self.interrupts
        self.interrupts = []
        was = first.message
        first.kind = "restart"
        also = "".join(f"; also line {e.line}: {e.message}" for e in rest)
        first.message = f"{was}{also}; the job resumed at step {step} (line {line}): one run, requeued"
        drop = {id(e) for e in rest}
        self.text_events = [e for e in self.text_events if id(e) not in drop]
        return True

    # -- console -----------------------------------------------------------------------------------------
    def keywords(self, mode: str, *, failures: bool = True) -> list[tuple[bytes, int]]:
        """Byte strings to search: the metric heads of ``mode`` (a grammar's name, or ``console`` for those
        searched always and the sniffed one) and, when events are wanted (and ``failures``), the failure
        keywords."""
        kws: list[tuple[bytes, int]] = []
        if self.want_metrics:
            if mode == "console":
                kinds = tuple(c for g, cs in _GRAMMARS if g.always or g.grammar == self.grammar for c in cs)
            else:
                kinds = next(cs for g, cs in _GRAMMARS if g.grammar == mode)
            for k in kinds:
                kws.extend((kw, k) for kw in _METRIC_KW[k])
        if self.want_events and failures:
            kws.extend((kw, _keyword_code(kw)) for kw in LINE_KEYWORDS)
        return kws

    def console(self, f, raw, kws, found=None):
        """Generator: reads the file, yielding after each block (records went to the sink / store).
        ``found``: ``(offsets, keyword index, code of each keyword)`` of the keywords ``kws`` leaves out, found in
        the file beforehand (:mod:`prefilter`)."""
        base = 1
        tail_newline = True
        off = k = 0
        for block in blocks(f, raw, self.progress, self.res.notes):
            extra = None
            if found is not None:
                offsets, which, codes = found
                end = off + len(block)
                extra = []
                while k < len(offsets) and offsets[k] < end:
                    extra.append((offsets[k] - off, codes[which[k]]))
                    k += 1
                off = end
            base = self.block(block, base, kws, extra)
            tail_newline = block.endswith(b"\n")
            yield
        self.res.num_lines = base - 1 + (0 if tail_newline else 1)
        self.flush_verl()
        for w in self.walkers:
            w.finish()
            self.text_events.append(w.found)
        self.walkers = []
        yield

    def block(self, block: bytes, base: int, kws, extra=None) -> int:
        """Process one block of complete lines whose first line is number ``base``; returns the number of
        the line after the block (when lines are counted). ``extra``: hits found beforehand, ``(offset in the
        block, code)``."""
        n = len(block)
        skip_until = self.resume(block, base)
        if not extra and len(kws) == 1 and kws[0][1] == _VERL and self.fast and n >= npscan.MIN_BYTES:
            return self.block_verl(block, base, skip_until)
        hits = _keyword_hits(block, kws, skip_until, extra)
        if not hits:
            return base + block.count(b"\n") if self.count_lines else base
        hits.sort()
        cur_pos, cur_line = 0, base
        count_lines = self.count_lines
        count = npscan.newline_counter(block) if count_lines and n >= npscan.MIN_BYTES else block.count
        fast = self.fast
        batch = self.batch
        line_body = fastverl.line_body
        find = block.find
        tb_cover = -1
        k = 0
        while k < len(hits):
            pos = hits[k][0]
            ls = block.rfind(b"\n", 0, pos) + 1
            le = find(b"\n", pos)
            if le == -1:
                le = n
            codes = set()
            vpos = -1
            while k < len(hits) and hits[k][0] < le:
                code = hits[k][1]
                codes.add(code)
                if code == _VERL:
                    vpos = hits[k][0]
                k += 1
            if ls < skip_until:
                continue
            if count_lines:
                line_no = cur_line + count(b"\n", cur_pos, ls)
                cur_pos, cur_line = ls, line_no
            else:
                line_no = 0
            if fast and len(codes) == 1 and vpos >= 0:
                r = line_body(block, ls, le, vpos)
                if r is not None:  # a plain verl line: decoded with the block's others (flush_batch)
                    batch.append((r[0], line_no, ls, r[1], le))
                    continue
            if batch:
                self.flush_batch(block)
            skip_until, tb_cover = self.read_line(block, ls, le, line_no, codes, skip_until, tb_cover)
            if skip_until < 0:  # a wrapped Megatron line runs past the block
                break
        return self._end_of_block(block, cur_pos, cur_line, base)

    def read_line(
        self, block: bytes, ls: int, le: int, line_no: int, codes: set, skip_until: int, tb_cover: int
    ) -> tuple[int, int]:
        """Read the line ``block[ls:le]`` whose keyword hits have the ``codes``: records, tracebacks, events.
        Returns the new ``(skip_until, tb_cover)`` (where the next line to read starts; where the traceback read
        last ends); ``skip_until`` is -1 when a wrapped Megatron record does not end in this block."""
        raw = block[ls:le].decode("utf-8", "replace")
        if _VERL in codes:
            head = verl_console.first_head(raw)
            if head >= 0 or verl_console.is_candidate(raw):
                skip_until = max(skip_until, self.verl(raw, line_no, block, le, head))
        if _ITER in codes or _VAL in codes:
            raw, end = self.megatron_wrapped(raw, line_no, codes, block, le)
            if end < 0:
                return -1, tb_cover
            skip_until = max(skip_until, end)
            self.emit_megatron(raw, line_no, codes)
        if _PIPE in codes:
            rec = pipe.parse_line(raw)
            if rec:
                self.emit(*rec, line_no, _P)
        if _TB in codes and "Traceback (most recent call last)" in raw:
            tb_cover = max(tb_cover, self.traceback(raw, line_no, block, le))
        if _RAY in codes and ls > tb_cover and "RayTaskError" in raw and _TB not in codes:
            msg = split_prefix(clean(raw))[1].strip()
            self.text_events.append(Event(kind="traceback", line=line_no, step=self.last_step, message=msg[:300]))
        if _EVT in codes:
            found = classify_line(raw, line_no, self.last_step)
            self.text_events.extend(found)
            self.interrupts.extend(e for e in found if e.kind in INTERRUPTION_KINDS)
        return skip_until, tb_cover

    def block_verl(self, block: bytes, base: int, skip_until: int) -> int:
        """:meth:`block` of a large block when only verl heads are searched (iter_records, the export): the same
        lines read the same way (a line whose only hit is a verl head), without the general loop's hit list."""
        heads, ends, seconds = npscan.verl_head_lines(block, skip_until)
        if not heads:
            return base + block.count(b"\n") if self.count_lines else base
        count_lines = self.count_lines
        count = npscan.newline_counter(block) if count_lines else None
        cur_pos, cur_line = 0, base
        batch = self.batch
        line_body = fastverl.line_body
        rfind = block.rfind
        line_no = 0
        for pos, le, second in zip(heads, ends, seconds):
            ls = rfind(b"\n", 0, pos) + 1
            if ls < skip_until:
                continue
            if count is not None:
                line_no = cur_line + count(b"\n", cur_pos, ls)
                cur_pos, cur_line = ls, line_no
            r = line_body(block, ls, le, pos, second)
            if r is not None:
                batch.append((r[0], line_no, ls, r[1], le))
                continue
            if batch:
                self.flush_batch(block)
            raw = block[ls:le].decode("utf-8", "replace")
            head = verl_console.first_head(raw)
            if head >= 0 or verl_console.is_candidate(raw):
                skip_until = max(skip_until, self.verl(raw, line_no, block, le, head))
        return self._end_of_block(block, cur_pos, cur_line, base)

    def _end_of_block(self, block: bytes, cur_pos: int, cur_line: int, base: int) -> int:
        if self.batch:
            self.flush_batch(block)
        return cur_line + block.count(b"\n", cur_pos) if self.count_lines else base

    def flush_batch(self, block: bytes) -> None:
        """Decode the queued plain verl lines of ``block`` at once (:mod:`fastverl`) and emit them in order; a
        batch that fails a check is retried line by line, and a line that still fails is read by :meth:`verl`."""
        batch = list(self.batch)
        self.batch.clear()  # emptied in place: block() holds the same list
        decoded = fastverl.decode([block[b:le] for _, _, _, b, le in batch])
        ds: Sequence[dict[str, float] | None]
        if decoded is not None:
            ds = decoded
        elif len(batch) == 1:
            ds = [None]
        else:
            ds = [_decode_one(block[b:le]) for *_, b, le in batch]
        for (step, line_no, ls, _, le), d in zip(batch, ds):
            if d is not None:
                self.emit_dict(step, d, line_no)
            else:
                raw = block[ls:le].decode("utf-8", "replace")
                self.verl(raw, line_no, block, le, verl_console.first_head(raw))

    def megatron_wrapped(self, text: str, line_no: int, codes, block: bytes, le: int) -> tuple[str, int]:
        """Join the physical lines of a hard-wrapped Megatron record; returns the joined text and the byte offset
        of the last line consumed, or ``(text, -1)`` when the block ended inside the record (it is finished
        with the next block, see :meth:`resume`)."""
        p, end, n = le + 1, le, len(block)
        for _ in range(megatron.MAX_WRAP_LINES - 1):
            if p >= n:
                self.pending_meg = (text, line_no, frozenset(codes & {_ITER, _VAL}), 1)
                return text, -1
            e = block.find(b"\n", p)
            e = n if e == -1 else e
            joined = megatron.join_continuation(text, block[p:e].decode("utf-8", "replace"))
            if joined is None:
                break
            text, end, p = joined, e, e + 1
        return text, end

    def emit_megatron(self, text: str, line_no: int, codes) -> None:
        if _ITER in codes:
            rec = megatron.parse_iteration(text)
            if rec:
                self.emit(*rec, line_no, _M)
        if _VAL in codes:
            rec = megatron.parse_validation(text, self.last_step)
            if rec:
                self.emit(*rec, line_no, _M)

    def resume(self, block: bytes, base: int) -> int:
        """Finish what the previous block left open (a wrapped metric line, tracebacks); returns the byte
        offset up to which lines were consumed."""
        consumed = 0
        if self.walkers:
            for w in self.walkers:
                p, ln = 0, base - 1
                while p < len(block):
                    e = block.find(b"\n", p)
                    e = len(block) if e == -1 else e
                    ln += 1
                    if w.feed(block[p:e].decode("utf-8", "replace"), ln):
                        break
                    p = e + 1
                else:
                    continue
                self.text_events.append(w.found)
            self.walkers = [w for w in self.walkers if w.event is None]
        if self.pending_verl is not None:
            text, line_no = self.pending_verl
            self.pending_verl = None
            consumed = self.verl(text, line_no, block, -1)
        if self.pending_meg is not None:
            text, line_no, codes, _ = self.pending_meg
            self.pending_meg = None
            text, end = self.megatron_wrapped(text, line_no, codes, block, -1)
            if end == -1 and self.pending_meg is not None:
                return len(block)
            self.emit_megatron(text, line_no, codes)
            consumed = max(consumed, end)
        return max(consumed, 0)

    def verl(self, text: str, line_no: int, block: bytes, le: int, head: int | None = None) -> int:
        """Parse a verl metric line, first joining hard-wrapped continuation lines; returns the byte offset
        of the last line consumed. ``head``: the offset of its ``step:N - `` head when the caller found it."""
        if head is None:
            head = verl_console.first_head(text)
        if head > 0:
            text = text[head:]  # drop the Ray prefix (and its colours) without a regex
        if "\x1b" in text:
            text = strip_ansi(text)
        p = le + 1
        end = le
        n = len(block)
        while True:
            if p >= n:
                self.pending_verl = (text, line_no)
                return n
            e = block.find(b"\n", p)
            e = n if e == -1 else e
            nb = block[p:e]
            if b" " in nb.replace(b" - ", b"").strip(b" -\r"):
                break  # a space outside the separators: not the rest of a metric line (the usual next line)
            joined = verl_console.join_continuation(text, nb.decode("utf-8", "replace"))
            if joined is None:
                break
            text, end, p = joined, e, e + 1
        for rec in verl_console.parse_clean_line(text) if head >= 0 else verl_console.parse_line(text):
            self.emit(*rec, line_no, _V)
        return end

    def flush_verl(self) -> None:
        if self.pending_meg is not None:
            text, line_no, codes, _ = self.pending_meg
            self.pending_meg = None
            self.emit_megatron(text, line_no, codes)
        if self.pending_verl is not None:
            text, line_no = self.pending_verl
            self.pending_verl = None
            for rec in verl_console.parse_line(text):
                self.emit(*rec, line_no, _V)

    def traceback(self, raw: str, line_no: int, block: bytes, le: int) -> int:
        w = TracebackWalker(raw, line_no, self.last_step)
        p, ln, n = le + 1, line_no, len(block)
        while p < n:
            e = block.find(b"\n", p)
            e = n if e == -1 else e
            ln += 1
            if w.feed(block[p:e].decode("utf-8", "replace"), ln):
                self.text_events.append(w.found)
                return e
            p = e + 1
        self.walkers.append(w)
        return n

    # -- formats with their own loader ----------------------------------------------------------------
    def file_records(self, records, kind: str):
        """Generator like :meth:`console` over ``records`` of a :class:`registry.FileReader` (a yield every 4096)."""
        n = 0
        for k, (step, keys, vals, ordinal) in enumerate(records, 1):
            self.emit(step, keys, vals, False, ordinal, kind)
            n = ordinal
            if k % 4096 == 0:
                yield
        self.res.num_lines = n
        yield

    # -- one record a line -------------------------------------------------------------------------------
    def lines(self, f, raw, reader: registry.LineReader, kind: str):
        """Generator like :meth:`console` over a :class:`registry.LineReader` format (JSONL)."""
        line_no = 0
        parse, strict = reader.parse, reader.strict
        for block in blocks(f, raw, self.progress, self.res.notes):
            lines = block.split(b"\n")
            if block.endswith(b"\n"):
                lines.pop()
            for line in lines:
                line_no += 1
                if not line.strip():
                    continue
                rec = parse(line.decode("utf-8", "replace"))
                if rec is None:
                    if strict:
                        self.res.skipped_lines += 1
                    continue
                self.emit(rec[0], rec[1], rec[2], False, line_no, kind)
            yield
        self.res.num_lines = line_no


def scan(source: LogSource, *, keep: bool = True, events: bool = True, sink=None, progress=None) -> ScanResult:
    """Read ``source`` once.

    ``keep``: store the values (for DataFrames); ``events``: find text and series events; ``sink``: called
    as ``sink(step, keys, values, line)`` for every record (the streaming CSV export); ``progress``: an
    object with ``update(nbytes)``.
    """
    gen = _scan_steps(source, keep=keep, events=events, sink=sink, progress=progress)
    for _ in gen:
        pass
    return gen.result


class _Steps:
    """Generator wrapper that keeps the :class:`ScanResult` once the scan is over."""

    def __init__(self, gen) -> None:
        self._gen = gen
        self._result: ScanResult | None = None

    def __iter__(self):
        self._result = yield from self._gen

    @property
    def result(self) -> ScanResult:
        """The scan's result (once the iteration is over)."""
        if self._result is None:
            raise RuntimeError("scan: the result is read before the scan finished")
        return self._result


def _scan_steps(source: LogSource, *, keep: bool, events: bool, sink, progress) -> _Steps:
    return _Steps(_scan_gen(source, keep=keep, events=events, sink=sink, progress=progress))


def _scan_gen(source: LogSource, *, keep: bool, events: bool, sink, progress):
    res = ScanResult(source=source, store=RecordStore() if keep else None)
    mpath, epath = source.metrics_path, source.events_path
    if mpath is None and epath is None:
        res.format = source.fmt
        if events:
            res.events = [
                Event(
                    kind="no_metrics",
                    line=None,
                    step=None,
                    message="run directory has neither metrics.jsonl nor train.log yet",
                )
            ]
        return res
    fmt = registry.get(source.fmt)
    if fmt is None:
        raise MliteError(f"log format '{source.fmt}' of '{source.path}' is not registered (any more)")
    reader = fmt.reader_for(source)
    grammar = reader.grammar if isinstance(reader, registry.ConsoleReader) else _V
    sc = _Scanner(res, keep=keep, events=events, series=events, sink=sink, progress=progress, grammar=grammar)
    if isinstance(reader, registry.FileReader):
        files = list(source.files) or [p for p in (mpath,) if p is not None]
        yield from sc.file_records(reader.records(files, res.notes), fmt.name)
    elif mpath is not None:
        f, raw = open_binary(mpath)
        try:
            if isinstance(reader, registry.LineReader):
                yield from sc.lines(f, raw, reader, fmt.name)
            else:
                mode = "console" if events else _export_mode(mpath, reader)
                kws = sc.keywords(mode, failures=False)
                found = None
                if events:
                    # one grep pass for the failure keywords and the metric heads but verl's 'step:' (searched
                    # here: its hits are many and need the digit test), instead of one bytes.find pass each
                    grepped = [(kw, _keyword_code(kw)) for kw in LINE_KEYWORDS] + [h for h in kws if h[1] != _VERL]
                    offsets = keyword_offsets(mpath, [kw for kw, _ in grepped])
                    if offsets is None:
                        kws = sc.keywords(mode)
                    else:
                        kws = [h for h in kws if h[1] == _VERL]
                        found = (*offsets, [code for _, code in grepped])
                yield from sc.console(f, raw, kws, found)
        finally:
            f.close()
            raw.close()
    console_events = isinstance(reader, registry.LineReader) and reader.console_events
    if events and epath is not None and (epath != mpath or console_events):
        # a run directory: text events from train.log (a console log read by a LineReader: from itself); steps
        # from its metric lines, records discarded
        sub = ScanResult(source=source)
        esc = _Scanner(sub, keep=False, events=True, series=False, sink=None, progress=progress)
        f, raw = open_binary(epath)
        try:
            for _ in esc.console(f, raw, esc.keywords("console")):
                pass
        finally:
            f.close()
            raw.close()
        sc.text_events.extend(esc.text_events)
        res.notes.extend(sub.notes)
    res.format = final_format(source, sc.first_kind)
    if events:
        series = sc.watch.finish() if sc.watch is not None else []
        if sc.watch is not None and sc.watch.loss_span is not None:
            res.loss_span = tuple(sc.watch.loss_span)
        text = fold(sorted(sc.text_events, key=lambda e: e.line or 0))
        evs = sorted(series + text, key=lambda e: e.line or 0)
        if not res.steps:
            evs.insert(0, no_metrics_event(source, res.format, evs, res.notes))
        res.events = evs
    return res


def _keyword_code(kw: bytes) -> int:
    return _TB if kw.startswith(b"Traceback") else _RAY if kw == b"RayTaskError" else _EVT


class _RecordSink:
    """Collects :class:`StepRecord` objects for :func:`iter_records`."""

    def __init__(self, pending: list[StepRecord]) -> None:
        self.pending = pending

    def __call__(self, step: int, keys: list[str], vals: list[float], line: int) -> None:
        self.pending.append(StepRecord(step=step, line=line, values=dict(zip(keys, vals))))

    def take_dict(self, step: int, values: dict[str, float], line: int) -> None:
        """A record whose ``{metric: value}`` dict is already built (:mod:`fastverl`)."""
        self.pending.append(StepRecord(step=step, line=line, values=values))


def iter_records(source: LogSource, *, progress=None):
    """Stream the step records of ``source`` as :class:`StepRecord` (a block's worth held at a time)."""
    pending: list[StepRecord] = []
    sink = _RecordSink(pending)
    for _ in _scan_steps(source, keep=False, events=False, sink=sink, progress=progress):
        yield from pending
        pending.clear()
    yield from pending


def _export_mode(path: Path, reader: registry.ConsoleReader) -> str:
    """For the export fast path: search only the heads of the sniffed grammar when the head of the file shows
    them (else ``console``: every grammar searched always)."""
    return reader.grammar if reader.shows(head_text(path)) else "console"
