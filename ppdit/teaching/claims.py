"""The claims ledger: headline claims of the documents ppdit grew from, and what its notebooks
measured when they reproduced them in miniature.

A notebook cell calls ``record(claim_id, measured=..., checks=[...])`` with the numbers it just
computed, which writes ``<claim_id>.json`` to ``claims_dir()``. Each ``Check`` compares one
measured quantity with the claim's prediction, within a stated tolerance, on a simulated clock
or on live ranks; the **verdict** is computed from the checks, never set by hand:

* "reproduced live": every check holds, and at least one ran on live ranks;
* "reproduced in simulation": the simulated checks hold, the live ones (if any) do not;
* "inconclusive live here": the simulated checks hold, a live check's 90% interval
  (``interval``, ``teaching.verdict``'s rule) straddles its bound, and no live check fails;
* "not reproduced": a check that decides it fails;
* "not reproducible here, because ...": the cell says why (``reproducible_here=False``);
* "unchecked": recorded without checks (the tests refuse that in a committed record).

The book's ledger page is generated from those files (``ledger_markdown``), so the page cannot
drift from what the cells measured. A claim no notebook has recorded yet is listed as pending."""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from ppdit.teaching.verdict import median_interval

REPORT = "Earlier step-split experiment report (SVD, 7x RTX A5000)"
GUIDE = "Bring-up study guide (PP0 -> PP1)"


@dataclass(frozen=True)
class Claim:
    """A claim as a source states it, and where ppdit reproduces it."""
    claim_id: str
    source: str
    text: str
    notebook: str  # notebook file stem that records it
    section: str  # heading of the section that reproduces it


CLAIMS: tuple[Claim, ...] = (
    Claim("report-handoff", REPORT,
          "Each handoff between pipeline ranks costs about 0.5 s (total time grows ~0.5 s "
          "per added handoff).", "01_step_split_pp", "3. Reproduced, and taken apart"),
    Claim("report-cold-step", REPORT,
          "Each rank's first step takes 700-900 ms against 140-180 ms for later steps.",
          "01_step_split_pp", "4. Where a step's time goes: the cold first step"),
    Claim("report-memory", REPORT, "Step splitting spreads memory: each GPU holds only its "
          "steps' activations, so peak memory per GPU falls about N-fold on N GPUs.",
          "03_layer_split_pp", "8. Memory per rank, measured: step split against layer split"),
    Claim("report-divisible", REPORT,
          "Steps are distributed evenly; total steps must be divisible by the rank count.",
          "01_step_split_pp", "1. The idea"),
    Claim("filling", REPORT, "Pipeline filling over multiple samples is the route to "
          "throughput (recommended, not measured); ideal R P / (R + P - 1).",
          "02_pipeline_filling", "2. Measured: throughput against the number of requests"),
    Claim("stream-batch", "StreamDiffusion (Kodaira et al., 2023)", "Stream Batch (batching "
          "denoising steps of different frames) raises throughput over processing them one "
          "by one.", "02_pipeline_filling", "4. The baselines a pipeline must beat"),
    Claim("bubble-gpipe", "GPipe / pipeline scheduling theory",
          "The bubble of P stages and M micro-batches is (P - 1)/(M + P - 1).",
          "03_layer_split_pp", "4. The bubble: formula, simulated clock, live ranks"),
    Claim("bubble-interleaved", "Megatron-LM interleaved schedule (Narayanan et al., 2021)",
          "V virtual stages per rank shrink the bubble to (P - 1)/(V M + P - 1).",
          "03_layer_split_pp", "5. Interleaving: V chunks per rank"),
    Claim("funcol-compile", GUIDE, "Moving tensor-parallel all-reduces to functional "
          "collectives kept torch.compile's graphs whole: 9.6 -> 24.5 FPS.",
          "05_tensor_parallel_funcol", "6. Eager against compiled"),
    Claim("vae-first-frame", "Streaming video decoders (StreamDiffusionV2, LightX2V)",
          "A causal VAE decoded chunk by chunk delivers its first frames long before a full "
          "decode finishes.", "09_streaming_vae",
          "3. What streaming buys: time to first frame, and memory"),
    Claim("cocodiff-v-first", "CoCoDiff (Ulysses sequence parallelism for DiT inference)",
          "Issuing V's all-to-all first hides it behind Q/K normalisation and RoPE.",
          "06_sequence_parallel", "4. V-first on a timeline"),
    Claim("cocodiff-tapa", "CoCoDiff (Ulysses sequence parallelism for DiT inference)",
          "Tile-Aware Parallel All-to-all decomposes the all-to-all into topology-aligned "
          "phases (intra-node first, then one inter-node exchange), speeding it up across "
          "nodes.", "07_context_parallel", "5. Across nodes: the all-to-all in two phases"),
    Claim("cocodiff-v-major", "CoCoDiff (Ulysses sequence parallelism for DiT inference)",
          "V-Major sends only the V projections that changed since the previous step; with "
          "TAPA and V-First, 3.6x average and 8.4x peak speedup over 1-8 nodes (no quality "
          "ablation given).", "07_context_parallel", "6. V-Major: bytes saved against quality"),
    Claim("report-oom", REPORT, "One 24 GB GPU runs out of memory part-way through the "
          "steps (memory accumulates over steps); splitting the work over GPUs makes it fit.",
          "11_memory", "3. The report's out-of-memory, in miniature"),
    Claim("report-memory-opts", REPORT, "Memory optimisations (flash attention, fp16, "
          "gradient checkpointing) give modest improvements but cannot fit the model on a "
          "single 24 GB GPU.", "11_memory", "4. The report's memory optimisations, one at a time"),
)


WHERE = ("simulation", "live")


@dataclass(frozen=True)
class Check:
    """One measured quantity against the claim's prediction: holds when ``|measured - expected|
    <= abs_tol + rel_tol * |expected|`` (``at_least=True``: when ``measured >= expected -`` that
    tolerance, for claims of the form "at least x"; ``at_most=True``: the mirror image)."""
    name: str  # what was measured, e.g. "live bubble, P=2, M=8, flushed"
    measured: float
    expected: float
    where: str  # "simulation" or "live"
    abs_tol: float = 0.0
    rel_tol: float = 0.0
    at_least: bool = False
    at_most: bool = False
    interval: tuple[float, float] | None = None  # a median's 90% interval (teaching.verdict)

    @classmethod
    def over_rounds(cls, name: str, values: Sequence[float], expected: float, where: str,
                    **kw) -> Check:
        """Per-round values, judged by their median's 90% interval (``teaching.verdict``)."""
        return cls(name, statistics.median(values), expected, where,
                   interval=median_interval(values), **kw)

    def __post_init__(self) -> None:
        if self.where not in WHERE:
            raise ValueError(f"where={self.where!r} is not one of {WHERE}")
        if self.at_least and self.at_most:
            raise ValueError("a check is at_least, at_most, or two-sided, not both")

    def _agrees(self, x: float) -> bool:
        slack = self.abs_tol + self.rel_tol * abs(self.expected)
        low, high = self.expected - slack, self.expected + slack
        return (self.at_most or x >= low) and (self.at_least or x <= high)

    def holds(self) -> bool:
        """Whether the measurement (all of its interval, if it has one) agrees with the
        prediction within the tolerance."""
        return all(map(self._agrees, self.interval or (self.measured,)))

    def undecided(self) -> bool:
        """An interval with the bound inside it: more rounds, not this run, would decide."""
        lo, hi = self.interval or (0.0, 0.0)
        return self.interval is not None and not self.holds() and (
            self._agrees(lo) or self._agrees(hi) or lo < self.expected < hi)

    def describe(self) -> str:
        """"live bubble: 0.24 vs 0.11 (tolerance 0.05): outside"."""
        sign = ">= " if self.at_least else "<= " if self.at_most else ""
        tol = self.abs_tol + self.rel_tol * abs(self.expected)
        within = "" if self.interval is None else (
            f" (90% interval {self.interval[0]:.4g}-{self.interval[1]:.4g})")
        word = "holds" if self.holds() else "undecided" if self.undecided() else "outside"
        return (f"{self.name}: {self.measured:.4g}{within} vs {sign}{self.expected:.4g} "
                f"(tolerance {tol:.2g}, {self.where}): {word}")


def verdict(checks: list[Check], reproducible_here: bool = True, why_not: str = "") -> str:
    """The ledger's verdict, computed from the checks (see the module docstring)."""
    if not reproducible_here:
        return f"not reproducible here, because {why_not}"
    if not checks:
        return "unchecked: recorded without checks"
    sim = [c.holds() for c in checks if c.where == "simulation"]
    live = [c for c in checks if c.where == "live"]
    if not all(sim):
        return "not reproduced"
    if live and all(c.holds() for c in live):
        return "reproduced live"
    if any(map(Check.undecided, live)) and all(c.holds() or c.undecided() for c in live):
        return "inconclusive live here"
    return "reproduced in simulation" if sim else "not reproduced"


ENV = "PPDIT_CLAIMS_DIR"


def _checkout() -> Path | None:
    """The repository root when ppdit runs from a checkout (editable install), else None."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "notebooks").is_dir() else None


def claims_dir() -> Path:
    """Where ``record`` writes: ``$PPDIT_CLAIMS_DIR``, else ``out/claims`` of the checkout. Not
    the ledger itself: a learner running a lesson would rewrite tracked files with their own
    machine's timings (``make notebooks`` sets ``PPDIT_CLAIMS_DIR=notebooks/claims``)."""
    return _claims_under("out", "claims")


def _claims_under(*parts: str) -> Path:
    """``$PPDIT_CLAIMS_DIR`` when set, else ``parts`` of the checkout (``./claims`` outside)."""
    if os.environ.get(ENV):
        return Path(os.environ[ENV])
    root = _checkout()
    return root.joinpath(*parts) if root else Path("claims")


def record(claim_id: str, measured: str, *, checks: list[Check] | None = None,
           reproducible_here: bool = True, why_not: str = "", values: dict | None = None) -> str:
    """Store what a cell measured for a claim (a sentence with its numbers, the checks that
    decide it, raw values) and return the computed verdict, for the cell to print."""
    known = {c.claim_id for c in CLAIMS}
    if claim_id not in known:
        raise ValueError(f"unknown claim {claim_id!r}: choose one of {sorted(known)}")
    if not reproducible_here and not why_not:
        raise ValueError("a claim that cannot be reproduced here needs why_not=...")
    checks = list(checks or [])
    decided = verdict(checks, reproducible_here, why_not)
    path = claims_dir() / f"{claim_id}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"claim_id": claim_id, "measured": measured,
                                "verdict": decided, "checks": [asdict(c) for c in checks],
                                "reproducible_here": reproducible_here, "why_not": why_not,
                                "values": values or {}}, indent=2) + "\n")
    return decided


def recorded_verdict(rec: dict) -> str:
    """A stored record's verdict, recomputed from its stored checks (so a file edited by hand
    cannot claim more than its numbers show)."""
    checks = [Check(**c) for c in rec.get("checks", [])]
    return verdict(checks, rec.get("reproducible_here", True), rec.get("why_not", ""))


def load(directory: Path | None = None) -> dict[str, dict]:
    """Every recorded claim, by id: by default the committed ledger, ``notebooks/claims``."""
    directory = directory or _claims_under("notebooks", "claims")
    return {p.stem: json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))}


def ledger_markdown(directory: Path | None = None, notebook_prefix: str = "notebooks/") -> str:
    """The ledger as a Markdown page: one row per claim, its source, where it is reproduced,
    what was measured there (or why it cannot be here), and pending rows for the rest."""
    data = load(directory)
    lines = [
        "# Claims ledger",
        "",
        "Headline claims of the documents ppdit grew from, each reproduced in miniature by a",
        "notebook cell on a CPU. The *measured* column is written by that cell when the",
        "notebook runs (`ppdit.teaching.claims.record`); this page is generated from those files.",
        "",
        "| claim | source | reproduced in | measured here | verdict |",
        "| --- | --- | --- | --- | --- |",
    ]
    for c in CLAIMS:
        rec = data.get(c.claim_id)
        where = (f"[{c.notebook}]({notebook_prefix}{c.notebook}.ipynb), "
                 f"§{c.section.split('.')[0]}")
        measured, decided = (("*pending: no notebook has recorded it yet*", "pending")
                             if rec is None else (rec["measured"], recorded_verdict(rec)))
        lines.append(f"| {c.text} | {c.source} | {where} | {measured} | **{decided}** |")
    return "\n".join(lines) + "\n"
