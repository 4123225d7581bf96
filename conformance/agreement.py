"""How well the embedded suite predicts upstream: its outcomes joined with upstream's.

The embedded suite runs where upstream's test files cannot, so it must predict them. This
module joins an embedded run's records (or several: shards, reruns) with an upstream run's on
what names the same check of the same op: ``(test_class, template, op, dtype)``, plus
``params`` (``training``, ``swap``, ... of module tests) and ``mode`` (eager or compile), which
both sides spell the same way. Files are not part of the key: upstream's forward-AD template
lives in ``test_ops_fwd_gradients.py``, the suite's in ``test_ops_gradients.py``.

Templates are joined only where both sides have them. The suite keeps upstream's class and
test names, except where its check is its own: :data:`RENAMED_TEMPLATES` maps those to the
upstream template they stand for. Where upstream's template takes no dtype and the suite's
does (``test_out_warning``: one dtype per op here, none upstream), the join is by op alone.

Each record reduces to a verdict (:func:`verdict`): ``pass`` (passed, xpassed: the test's
body passed), ``fail`` (failed, error, crashed, timeout, and xfailed under a skiplist entry:
a known failure of the backend), ``xfail-opinfo`` (xfailed with no skiplist entry: the
OpInfo's own expected failure) or ``skip`` (skipped, deselected: the test did not run). A
pair of verdicts is one of :data:`KINDS`; the agreement rate is over the pairs where both
sides ran.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from conformance.errors import ConfigError
from conformance.model import COLLECTION_ERROR

if TYPE_CHECKING:
    import pandas

__all__ = [
    "KINDS",
    "RENAMED_TEMPLATES",
    "VERDICTS",
    "AgreementReport",
    "Disagreement",
    "TemplateAgreement",
    "agreement",
    "format_report",
    "verdict",
]

#: Embedded ``(test_class, template)`` whose check is the suite's own, and the upstream
#: template it stands for. ``test_fn_grad_compare_cpu`` compares the device's gradients
#: with the CPU's where upstream's ``test_fn_grad`` runs gradcheck on the device; both fail
#: when the device's backward is wrong. Every other joined template has upstream's name.
RENAMED_TEMPLATES: dict[tuple[str, str], tuple[str, str]] = {
    ("TestCompareCpuGradients", "test_fn_grad_compare_cpu"): ("TestBwdGradients", "test_fn_grad"),
}

#: A record's verdict, most severe first (the order in which records that fold into one key,
#: the dtypes of an op joined by op alone, choose the one that speaks for them).
VERDICTS = ("fail", "xfail-opinfo", "pass", "skip")

#: What a pair of verdicts is. The first three are agreements; ``miss`` (embedded passed,
#: upstream failed: the suite misses a bug), ``false_failure`` (embedded failed, upstream
#: passed) and ``xfail_differs`` (an expected failure of the OpInfo on one side only, the
#: other side ran) are disagreements; in the last two at least one side did not run.
KINDS = (
    "both_pass",
    "both_fail",
    "both_xfail",
    "miss",
    "false_failure",
    "xfail_differs",
    "one_skipped",
    "both_skipped",
)
_AGREE = ("both_pass", "both_fail", "both_xfail")
_DISAGREE = ("miss", "false_failure", "xfail_differs")

_PASS = ("passed", "xpassed")
_FAIL = ("failed", "error", "crashed", "timeout")
_SKIP = ("skipped", "deselected")

#: The record columns the join reads.
COLUMNS = (
    "test_id",
    "suite",
    "test_class",
    "template",
    "op",
    "dtype",
    "params",
    "mode",
    "outcome",
    "category",
    "detail",
    "message",
    "skip_entry",
)
_KEY = ("test_class", "template", "op", "dtype", "params", "mode")
_SIDE_FIELDS = ("verdict", "outcome", "category", "detail", "message", "skip_entry", "test_id")
#: Characters of a side's message kept in a disagreement.
MESSAGE_CHARS = 300


def verdict(outcome: str, skip_entry: str = "") -> str:
    """The verdict of one record: ``pass``, ``fail``, ``xfail-opinfo`` or ``skip``."""
    if outcome in _PASS:
        return "pass"
    if outcome in _FAIL:
        return "fail"
    if outcome == "xfailed":
        return "fail" if skip_entry else "xfail-opinfo"
    if outcome in _SKIP:
        return "skip"
    raise ConfigError(f"unknown outcome {outcome!r}", where="record outcome")


@dataclass(frozen=True)
class Side:
    """One side's record in a pair."""

    verdict: str
    outcome: str
    category: str
    detail: str
    message: str
    skip_entry: str
    test_id: str

    def describe(self, width: int = 100) -> str:
        """``failed numerical_mismatch/float32: first line of the message``, cut to width."""
        cause = "/".join(part for part in (self.category, self.detail) if part)
        text = " ".join(part for part in (self.outcome, cause) if part)
        first = self.message.strip().splitlines()[0] if self.message.strip() else ""
        if first:
            text += f": {first}"
        return text if len(text) <= width else text[: width - 3] + "..."


@dataclass(frozen=True)
class Disagreement:
    """A pair whose verdicts differ (or where one side did not run)."""

    kind: str
    op: str
    dtype: str
    params: str
    mode: str
    embedded: Side
    upstream: Side


@dataclass
class TemplateAgreement:
    """The join of one template: counts of pairs by kind, and the pairs that disagree."""

    test_class: str
    template: str  # upstream's name
    embedded_template: str  # the suite's (the same, unless renamed)
    by_op_only: bool = False  # joined without dtype: upstream's template takes none
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    only_embedded: int = 0
    only_upstream: int = 0
    disagreements: list[Disagreement] = field(default_factory=list)  # misses first
    one_skipped: list[Disagreement] = field(default_factory=list)

    @property
    def name(self) -> str:
        text = f"{self.test_class}.{self.template}"
        if self.embedded_template != self.template:
            text += f" (embedded {self.embedded_template})"
        return text

    @property
    def pairs(self) -> int:
        return sum(self.counts.values())

    @property
    def ran(self) -> int:
        """Pairs where both sides ran (passed, failed or failed as the OpInfo expects)."""
        return sum(self.counts[k] for k in (*_AGREE, *_DISAGREE))

    @property
    def agreed(self) -> int:
        return sum(self.counts[k] for k in _AGREE)

    @property
    def rate(self) -> float | None:
        """Share of the pairs where both ran that agree; None when no pair ran on both."""
        return self.agreed / self.ran if self.ran else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "test_class": self.test_class,
            "template": self.template,
            "embedded_template": self.embedded_template,
            "by_op_only": self.by_op_only,
            "pairs": self.pairs,
            "ran": self.ran,
            "agreed": self.agreed,
            "rate": self.rate,
            "counts": dict(self.counts),
            "only_embedded": self.only_embedded,
            "only_upstream": self.only_upstream,
            "disagreements": [_pair_dict(d) for d in self.disagreements],
            "one_skipped": [_pair_dict(d) for d in self.one_skipped],
        }


@dataclass
class AgreementReport:
    """Every joined template, and the templates only one side has (tests per template)."""

    templates: list[TemplateAgreement]
    embedded_only: dict[str, int] = field(default_factory=dict)
    upstream_only: dict[str, int] = field(default_factory=dict)
    embedded_records: int = 0
    upstream_records: int = 0

    def total(self) -> TemplateAgreement:
        """The counts of every joined template added up (no disagreements listed)."""
        total = TemplateAgreement("total", "", "")
        for item in self.templates:
            for kind, count in item.counts.items():
                total.counts[kind] += count
            total.only_embedded += item.only_embedded
            total.only_upstream += item.only_upstream
        return total

    def to_dict(self) -> dict[str, Any]:
        total = self.total()
        return {
            "key": list(_KEY),
            "renamed_templates": {".".join(k): ".".join(v) for k, v in RENAMED_TEMPLATES.items()},
            "embedded_records": self.embedded_records,
            "upstream_records": self.upstream_records,
            "total": {
                "pairs": total.pairs,
                "ran": total.ran,
                "agreed": total.agreed,
                "rate": total.rate,
                "counts": dict(total.counts),
                "only_embedded": total.only_embedded,
                "only_upstream": total.only_upstream,
            },
            "templates": [t.to_dict() for t in self.templates],
            "embedded_only_templates": dict(self.embedded_only),
            "upstream_only_templates": dict(self.upstream_only),
        }


def _pair_dict(pair: Disagreement) -> dict[str, Any]:
    return {
        "kind": pair.kind,
        "op": pair.op,
        "dtype": pair.dtype,
        "params": pair.params,
        "mode": pair.mode,
        "embedded": vars(pair.embedded).copy(),
        "upstream": vars(pair.upstream).copy(),
    }


def _frames(frames: pandas.DataFrame | Iterable[pandas.DataFrame]) -> list[pandas.DataFrame]:
    import pandas

    return [frames] if isinstance(frames, pandas.DataFrame) else list(frames)


def _side(frames: Sequence[pandas.DataFrame], suite: str) -> pandas.DataFrame:
    """One side's records: the suite's tests only, a test recorded twice (shards, reruns)
    by its last record, collection errors left out, with a verdict per record."""
    import pandas

    if not frames:
        raise ConfigError("no run given", where=f"{suite} runs")
    missing = [c for c in COLUMNS if any(c not in f.columns for f in frames) and c != "mode"]
    if missing:
        raise ConfigError(f"records lack the columns {', '.join(missing)}", where=f"{suite} runs")
    frame = pandas.concat([f.reindex(columns=list(COLUMNS)) for f in frames], ignore_index=True)
    frame["mode"] = frame["mode"].fillna("eager")
    frame = frame.fillna("")
    frame = frame[frame["suite"] == suite]
    if frame.empty:
        raise ConfigError(f"no records of the {suite} suite", where=f"{suite} runs")
    frame = frame[~((frame["category"] == COLLECTION_ERROR) & (frame["template"] == ""))]
    frame = frame.drop_duplicates("test_id", keep="last").copy()
    outcomes, entries = frame["outcome"].tolist(), frame["skip_entry"].tolist()
    frame["verdict"] = [verdict(o, s) for o, s in zip(outcomes, entries, strict=True)]
    frame["message"] = frame["message"].str.slice(0, MESSAGE_CHARS)
    return frame


def _fold(frame: pandas.DataFrame) -> pandas.DataFrame:
    """One row per key: the most severe verdict speaks for records that share a key."""
    rank = {v: i for i, v in enumerate(VERDICTS)}
    frame = frame.assign(_rank=frame["verdict"].map(rank))
    frame = frame.sort_values(["_rank", "test_id"], kind="stable")
    return frame.drop_duplicates(list(_KEY), keep="first").drop(columns="_rank")


def _kind(embedded: str, upstream: str) -> str:
    if embedded == "skip" or upstream == "skip":
        return "both_skipped" if embedded == upstream else "one_skipped"
    if embedded == upstream:
        return {"pass": "both_pass", "fail": "both_fail"}.get(embedded, "both_xfail")
    if embedded == "pass" and upstream == "fail":
        return "miss"
    if embedded == "fail" and upstream == "pass":
        return "false_failure"
    return "xfail_differs"


def _template_names(frame: pandas.DataFrame) -> pandas.Series:
    return frame["test_class"] + "." + frame["template"]


def agreement(
    embedded: pandas.DataFrame | Iterable[pandas.DataFrame],
    upstream: pandas.DataFrame | Iterable[pandas.DataFrame],
    template: str | None = None,
) -> AgreementReport:
    """Join the embedded suite's records with upstream's (one frame or several of each,
    as ``store.read_run`` returns them) and count, per template both have, how they agree.

    ``template`` keeps one template: its upstream or embedded name, bare or with the class
    (``test_out``, ``TestCommon.test_out``, ``test_fn_grad_compare_cpu``); ConfigError when
    no joined template has that name."""

    emb = _side(_frames(embedded), "embedded")
    up = _side(_frames(upstream), "upstream")
    report = AgreementReport([], embedded_records=len(emb), upstream_records=len(up))

    # The suite's own names -> upstream's, keeping the suite's beside them.
    emb["embedded_template"] = emb["template"]
    for (cls, name), (up_cls, up_name) in RENAMED_TEMPLATES.items():
        renamed = (emb["test_class"] == cls) & (emb["template"] == name)
        emb.loc[renamed, "test_class"] = up_cls
        emb.loc[renamed, "template"] = up_name

    emb_names, up_names = _template_names(emb), _template_names(up)
    shared = sorted(set(emb_names) & set(up_names))
    report.embedded_only = _counts(emb.loc[~emb_names.isin(shared)], "embedded_template")
    report.upstream_only = _counts(up.loc[~up_names.isin(shared)], "template")
    if template is not None:
        shared = _pick(template, shared)
    for name in shared:
        report.templates.append(_join(name, emb.loc[emb_names == name], up.loc[up_names == name]))
    return report


def _join(name: str, emb: pandas.DataFrame, up: pandas.DataFrame) -> TemplateAgreement:
    """The agreement of one template, ``Class.template`` as upstream names it."""
    import pandas

    by_op_only = bool((up["dtype"] == "").all() and (emb["dtype"] != "").any())
    if by_op_only:  # upstream takes no dtype: its one test per op speaks for every dtype
        emb = emb.assign(dtype="")
    emb, up = _fold(emb), _fold(up)
    cls, _, template = name.partition(".")
    item = TemplateAgreement(cls, template, str(emb["embedded_template"].iloc[0]), by_op_only)
    joined = pandas.merge(
        emb[[*_KEY, *_SIDE_FIELDS]],
        up[[*_KEY, *_SIDE_FIELDS]],
        on=list(_KEY),
        how="outer",
        suffixes=("_e", "_u"),
        indicator=True,
    )
    item.only_embedded = int((joined["_merge"] == "left_only").sum())
    item.only_upstream = int((joined["_merge"] == "right_only").sum())
    both = joined[joined["_merge"] == "both"]
    # Plain lists: iterating a column of Arrow strings costs a hundred times more.
    pairs = zip(both["verdict_e"].tolist(), both["verdict_u"].tolist(), strict=True)
    kinds = [_kind(a, b) for a, b in pairs]
    item.counts.update(Counter(kinds))
    listed = [i for i, kind in enumerate(kinds) if kind in _DISAGREE or kind == "one_skipped"]
    rows = both.iloc[listed]
    side_e = [rows[f"{f}_e"].tolist() for f in _SIDE_FIELDS]
    side_u = [rows[f"{f}_u"].tolist() for f in _SIDE_FIELDS]
    keys = [rows[k].tolist() for k in ("op", "dtype", "params", "mode")]
    for n, i in enumerate(listed):
        pair = Disagreement(
            kinds[i],
            *(column[n] for column in keys),
            Side(*(column[n] for column in side_e)),
            Side(*(column[n] for column in side_u)),
        )
        (item.one_skipped if pair.kind == "one_skipped" else item.disagreements).append(pair)
    order = {k: i for i, k in enumerate(_DISAGREE)}
    item.disagreements.sort(key=lambda d: (order[d.kind], d.op, d.dtype, d.params, d.mode))
    item.one_skipped.sort(key=lambda d: (d.op, d.dtype, d.params, d.mode))
    return item


def _counts(frame: pandas.DataFrame, column: str) -> dict[str, int]:
    names = frame["test_class"] + "." + frame[column]
    return {str(k): int(v) for k, v in sorted(names.value_counts().items())}


def _pick(template: str, shared: list[str]) -> list[str]:
    """The joined templates ``template`` names (upstream's name or the suite's)."""
    picked = []
    for name in shared:
        cls, _, tmpl = name.partition(".")
        aliases = {name, tmpl}
        for (own_cls, own), target in RENAMED_TEMPLATES.items():
            if target == (cls, tmpl):
                aliases |= {f"{own_cls}.{own}", own}
        if template in aliases:
            picked.append(name)
    if not picked:
        known = ", ".join(shared) or "none"
        raise ConfigError(
            f"no template named {template!r} on both sides; joined templates: {known}",
            where="--template",
        )
    return picked


# ---------------------------------------------------------------------------------------
# Text output

_HEADER = (
    "template",
    "pairs",
    "ran",
    "agree",
    "miss",
    "false",
    "xfail",
    "skip1",
    "skip2",
    "emb-only",
    "up-only",
)
LEGEND = """\
pairs: tests joined on (class, template, op, dtype, params, mode); ran: pairs where both ran;
agree: share of those with the same verdict (pass, fail, or the OpInfo's expected failure);
miss: embedded passed, upstream failed (the suite misses a bug);
false: embedded failed, upstream passed (a false failure);
xfail: the OpInfo's expected failure on one side only, the other side ran;
skip1/skip2: skipped on one side/both; emb-only/up-only: tests of the template on one side."""


def _row(item: TemplateAgreement, name: str) -> list[str]:
    c = item.counts
    rate = "-" if item.rate is None else f"{math.floor(item.rate * 1000) / 10:.1f}%"
    return [
        name,
        str(item.pairs),
        str(item.ran),
        rate,
        str(c["miss"]),
        str(c["false_failure"]),
        str(c["xfail_differs"]),
        str(c["one_skipped"]),
        str(c["both_skipped"]),
        str(item.only_embedded),
        str(item.only_upstream),
    ]


def format_report(report: AgreementReport, show: int = 10) -> str:
    """The per-template table, a total row, then up to ``show`` disagreements per template
    (misses first, then false failures, then differing expected failures)."""
    rows = [_row(t, t.name + (" [by op]" if t.by_op_only else "")) for t in report.templates]
    rows.append(_row(report.total(), "total"))
    widths = [max(len(r[i]) for r in [list(_HEADER), *rows]) for i in range(len(_HEADER))]

    def line(cells: Sequence[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([first, *rest]).rstrip()

    out = [
        f"embedded suite against upstream: {report.embedded_records} embedded and "
        f"{report.upstream_records} upstream records; templates joined: {len(report.templates)}",
        "",
        line(_HEADER),
        *(line(r) for r in rows),
        "",
        LEGEND,
    ]
    if any(t.by_op_only for t in report.templates):
        out.append("[by op]: upstream's template takes no dtype; joined on op alone.")
    if report.embedded_only:
        listed = ", ".join(f"{k} ({v})" for k, v in report.embedded_only.items())
        out += ["", f"embedded templates with no upstream tests here: {listed}"]
    if report.upstream_only:
        out += [
            "",
            f"upstream templates with no embedded counterpart: {len(report.upstream_only)}, "
            f"tests: {sum(report.upstream_only.values())} (listed in the JSON report)",
        ]
    if show > 0:
        for item in report.templates:
            if not item.disagreements:
                continue
            shown = item.disagreements[:show]
            out += ["", f"{item.name}: {len(shown)} of {len(item.disagreements)} disagreements"]
            for pair in shown:
                what = " ".join(p for p in (pair.op, pair.dtype, pair.params) if p)
                out.append(f"  {pair.kind:<13} {what}")
                out.append(f"    embedded: {pair.embedded.describe()}")
                out.append(f"    upstream: {pair.upstream.describe()}")
    return "\n".join(out)
