"""Token-estimate throughput: the SQL macro in DuckDB vs the Python reference.

Two mixes, fixed seed: the *transcript mix* draws N strings (default 1,000,000) with
replacement from every string value of the real samples (message texts, tool inputs and
outputs: what the lake estimates); the *dense mix* is synthetic CJK-heavy prose with emoji, full-width
forms and ASCII identifiers (a stress case: the regex cost grows with non-ASCII density).
Prints strings/s for each path and writes ``bench/results/tokens.json``.

    .venv/bin/python bench/tokens_bench.py [--n 1000000] [--n-dense 100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
from pathlib import Path

import duckdb
import pyarrow as pa

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipeline.core.lake import new_connection  # noqa: E402
from pipeline.text.tokens import estimate_tokens  # noqa: E402

REAL = REPO.parent / "shared" / "data" / "real"


def real_texts() -> list[str]:
    """Every string value of the real samples' JSON (message texts, tool inputs, outputs)."""
    out: list[str] = []

    def walk(value):
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    for path in sorted(REAL.rglob("*")):
        if not path.is_file() or path.suffix not in (".jsonl", ".json", ".traj"):
            continue
        text = path.read_text(encoding="utf-8")
        try:
            walk(json.loads(text))
        except json.JSONDecodeError:
            for line in text.splitlines():
                if line.strip():
                    walk(json.loads(line))
    return out


HANZI = ("的是了我不人在他有这个上们来到时大地为子中你说生国年着就那和要她出也得里后自以会家可下"
         "而过天去能对小多然于心学么之都好看起发当没成只如事把还用第样道想作种开美总从无情己面最女但"
         "现前些所同日手又行意动方期它头经长儿回位分爱老因很给名法间斯知世什两次使身者被高已亲其进此话"
         "常与活正感日本語の文章です漢字測試")


def synthetic(rng: random.Random, count: int) -> list[str]:
    """CJK-heavy prose as users write it: runs of ideographs, CJK punctuation, full-width forms,
    emoji, accented words and ASCII identifiers; about 300 characters each."""
    def piece() -> str:
        r = rng.random()
        if r < 0.45:
            return "".join(rng.choice(HANZI) for _ in range(rng.randint(2, 20)))
        if r < 0.55:
            return rng.choice("、。「」（）！？：")
        if r < 0.60:
            return "".join(rng.choice("ＡＢＣＤ１２３ｱｲｳ") for _ in range(rng.randint(1, 5)))
        if r < 0.65:
            return rng.choice(["😀", "👍🏽", "🇯🇵", "👨\u200d👩\u200d👧", "✅", "𝄞"])
        if r < 0.70:
            return " " + "".join(rng.choice("éàüñçαβγабв") for _ in range(rng.randint(1, 6))) + " "
        return " " + "".join(rng.choice("abcdefghijklmnop_0123") for _ in range(rng.randint(2, 10))) + " "

    out = []
    for _ in range(count):
        parts, size = [], 0
        while size < 300:
            parts.append(piece())
            size += len(parts[-1])
        out.append("".join(parts))
    return out


def timed(fn, repeat: int) -> tuple[float, object]:
    best, value = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - start)
    return best, value


def measure(name: str, texts: list[str], repeat: int) -> dict:
    """strings/s of the SQL macro (DuckDB table and Arrow scan) and of the Python reference."""
    chars = sum(len(t) for t in texts)
    ascii_share = sum(t.isascii() for t in texts) / len(texts)
    table = pa.table({"t": pa.array(texts, pa.string())})
    con = new_connection()
    con.register("strings_arrow", table)
    con.execute("CREATE TABLE strings AS SELECT * FROM strings_arrow")
    sql_native, total_sql = timed(
        lambda: con.execute("SELECT sum(est_tokens(t)) FROM strings").fetchall()[0][0], repeat)
    sql_arrow, total_arrow = timed(
        lambda: con.execute("SELECT sum(est_tokens(t)) FROM strings_arrow").fetchall()[0][0], repeat)
    con.close()
    python, total_py = timed(lambda: sum(estimate_tokens(t) for t in texts), repeat)
    if not (total_sql == total_arrow == total_py):
        raise SystemExit(f"{name}: totals differ: sql {total_sql}, arrow {total_arrow}, python {total_py}")
    n = len(texts)
    result = {
        "strings": n, "avg_chars": round(chars / n, 1), "ascii_share": round(ascii_share, 4),
        "total_est_tokens": total_sql,
        "sql_table_seconds": round(sql_native, 3), "sql_table_strings_per_s": round(n / sql_native),
        "sql_arrow_seconds": round(sql_arrow, 3), "sql_arrow_strings_per_s": round(n / sql_arrow),
        "python_seconds": round(python, 3), "python_strings_per_s": round(n / python),
    }
    print(f"\n{name}: {n:,} strings, {chars / n:.0f} chars on average, {ascii_share:.0%} pure ASCII")
    print(f"  SQL macro, DuckDB table : {result['sql_table_strings_per_s']:>12,} strings/s "
          f"({sql_native:.3f} s, best of {repeat})")
    print(f"  SQL macro, Arrow scan   : {result['sql_arrow_strings_per_s']:>12,} strings/s ({sql_arrow:.3f} s)")
    print(f"  Python estimate_tokens  : {result['python_strings_per_s']:>12,} strings/s ({python:.3f} s)")
    print(f"  SQL / Python            : {python / sql_native:.1f}x")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="strings in the transcript mix")
    parser.add_argument("--n-dense", type=int, default=100_000, help="strings in the CJK/emoji-dense mix")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "tokens.json")
    args = parser.parse_args()

    rng = random.Random(20261103)
    pool = real_texts()
    transcript = [pool[rng.randrange(len(pool))] for _ in range(args.n)]
    dense = synthetic(rng, args.n_dense)
    print(f"duckdb {duckdb.__version__}, python {platform.python_version()}, {os.cpu_count()} cores; "
          f"transcript mix drawn from {len(pool):,} string values of the real samples")
    results = {
        "transcript_mix": measure("transcript mix (real samples' strings)", transcript, args.repeat),
        "dense_mix": measure("CJK-heavy synthetic prose (with emoji, full-width, code words)", dense, args.repeat),
        "target_strings_per_s": 1_000_000,
        "duckdb": duckdb.__version__, "python": platform.python_version(), "cores": os.cpu_count(),
    }
    met = results["transcript_mix"]["sql_table_strings_per_s"] >= 1_000_000
    print(f"\ntarget 1,000,000 strings/s on the transcript mix: {'met' if met else 'MISSED'}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {args.out.relative_to(REPO) if args.out.is_relative_to(REPO) else args.out}")


if __name__ == "__main__":
    main()
