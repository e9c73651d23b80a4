#!/usr/bin/env python3
"""bench/run's helper: per-phase JSON, the table, the results file.

  report.py wrk PHASE.json WRK_OUTPUT KEY=VALUE...
  report.py pgbench PHASE.json PGBENCH_OUTPUT LOG_PREFIX KEY=VALUE...
  report.py table WORKDIR OUT.json

`wrk`/`pgbench` turn one load run into WORKDIR/phases/ID.json and exit 1 when
the run is unusable (nothing completed, or more than 1% errors). `table` reads
WORKDIR/meta.json, phases/*.json and purge.json, prints the table, writes
OUT.json, and exits 0 whatever the targets say: PASS/MISS is information, not
a failure. Standard library only.
"""

import glob
import json
import math
import os
import sys

MAX_ERROR_RATE = 0.01


# Values that stay text even when they look like numbers.
TEXT_KEYS = {"id", "mode", "commit", "started_at", "binary", "cpu", "pg_version", "pool_size",
             "workers", "pool_timeout", "loadavg_start", "loadavg_end", "transport"}


def extras(pairs):
    out = {}
    for pair in pairs:
        k, _, v = pair.partition("=")
        if k in TEXT_KEYS:
            out[k] = v
            continue
        try:
            out[k] = int(v)
        except ValueError:
            try:
                out[k] = float(v)
            except ValueError:
                out[k] = v
    return out


def percentile(sorted_values, q):
    if not sorted_values:
        return None
    # nearest rank, as wrk reports its percentiles
    i = min(len(sorted_values) - 1, max(0, math.ceil(q / 100.0 * len(sorted_values)) - 1))
    return sorted_values[i]


def check_and_write(path, phase):
    done = phase.get("requests", 0)
    errs = phase.get("errors_total", 0)
    phase["ok"] = done > 0 and errs <= MAX_ERROR_RATE * done and not phase.get("invariant_errors")
    with open(path, "w") as f:
        json.dump(phase, f, indent=2, sort_keys=True)
    if not phase["ok"]:
        print("phase %s unusable: %d completed, %d errors%s" % (
            phase.get("id"), done, errs, " (database check failed)" if phase.get("invariant_errors") else ""),
            file=sys.stderr)
        sys.exit(1)


def wrk_phase(path, output, pairs):
    line = None
    with open(output) as f:
        for raw in f:
            if raw.startswith("BENCH_JSON "):
                line = raw[len("BENCH_JSON "):]
    if line is None:
        print("no BENCH_JSON line in %s" % output, file=sys.stderr)
        sys.exit(1)
    phase = json.loads(line)
    phase.update(extras(pairs))
    secs = phase["duration_us"] / 1e6
    phase["seconds"] = secs
    phase["rps"] = phase["requests"] / secs if secs > 0 else None
    phase["errors_total"] = sum(phase["errors"].values())
    phase["tool"] = "wrk"
    check_invariants(phase)
    check_and_write(path, phase)


def check_invariants(phase):
    """What the database must show after the phase, from wrk's own counts."""
    ok = phase["requests"] - phase["errors"]["status"]
    dc, dk = phase.get("charges_delta"), phase.get("keys_delta")
    if dc is None or dk is None:
        return
    mode, problems = phase.get("mode"), []
    if mode == "fresh":
        if dc < ok:
            problems.append("%d charges for %d created responses" % (dc, ok))
        if not phase.get("purging") and dk != dc:
            problems.append("%d new key rows for %d new charges" % (dk, dc))
    elif mode == "naive":
        if dc < ok:
            problems.append("%d charges for %d created responses" % (dc, ok))
        if dk != 0:
            problems.append("%d key rows appeared without keys" % dk)
    elif mode in ("replay", "health", "ready"):
        if dc != 0 or dk != 0:
            problems.append("%s requests created %d charges and %d key rows" % (mode, dc, dk))
    elif mode == "refund":
        dr = phase.get("refunds_delta")
        if dc != 0:
            problems.append("refunds created %d charges" % dc)
        if dr is not None and (dr < ok or dk != dr):
            problems.append("%d refunds and %d new key rows for %d created responses" % (dr, dk, ok))
    if problems:
        phase["invariant_errors"] = problems
        print("phase %s: %s" % (phase.get("id"), "; ".join(problems)), file=sys.stderr)


def pgbench_phase(path, output, log_prefix, pairs):
    phase = {"tool": "pgbench"}
    with open(output) as f:
        text = f.read()
    for raw in text.splitlines():
        raw = raw.strip()
        if raw.startswith("tps = ") and "without initial connection time" in raw:
            phase["rps"] = float(raw.split()[2])
        elif raw.startswith("number of transactions actually processed:"):
            phase["requests"] = int(raw.split(":")[1].split("/")[0])
        elif raw.startswith("number of failed transactions:"):
            phase["failed"] = int(raw.split(":")[1].split()[0])
    phase.update(extras(pairs))
    lat = []
    for name in glob.glob(log_prefix + ".*"):
        with open(name) as f:
            for raw in f:
                parts = raw.split()
                # client_id transaction_no time script_no time_epoch time_us
                if len(parts) >= 6 and parts[2].isdigit():
                    lat.append(int(parts[2]))
    lat.sort()
    phase["latency_us"] = {
        "p50": percentile(lat, 50), "p90": percentile(lat, 90), "p99": percentile(lat, 99),
        "p999": percentile(lat, 99.9), "max": lat[-1] if lat else None,
        "mean": sum(lat) / len(lat) if lat else None,
    }
    phase["errors_total"] = phase.get("failed", 0) + (0 if "aborted" not in text else 1)
    if "rps" not in phase:
        phase["requests"] = 0
    check_and_write(path, phase)


def load(workdir):
    with open(os.path.join(workdir, "meta.json")) as f:
        meta = json.load(f)
    phases = {}
    pdir = os.path.join(workdir, "phases")
    for name in sorted(os.listdir(pdir)):
        if name.endswith(".json"):
            with open(os.path.join(pdir, name)) as f:
                p = json.load(f)
            phases[p["id"]] = p
    purge = None
    ppath = os.path.join(workdir, "purge.json")
    if os.path.exists(ppath):
        with open(ppath) as f:
            purge = json.load(f)
    failover = None
    fpath = os.path.join(workdir, "failover.json")
    if os.path.exists(fpath):
        with open(fpath) as f:
            failover = json.load(f)
    meta["failover"] = failover
    opath = os.path.join(workdir, "outbox.json")
    if os.path.exists(opath):
        with open(opath) as f:
            meta["outbox"] = json.load(f)
    return meta, phases, purge


def ms(us):
    return None if us is None else us / 1000.0


def fmt(v, spec, none="-"):
    return none if v is None else format(v, spec)


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def median(values):
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


ROUND_PHASES = ("3", "1", "0", "2")  # the order within a round


def fold_rounds(phases):
    """Phases 1, 2 and 3 run in rounds, ids "1.1", "1.2", ...: one round is 3,
    1, 2 back to back, so each ratio compares runs a few seconds apart. The
    row shown for a phase is its median round (by req/s); each ratio is the
    median of the per-round ratios."""
    rounds = sorted({int(pid.split(".")[1]) for pid in phases if pid.split(".")[0] in ROUND_PHASES
                     and "." in pid})
    per_round = []
    for r in rounds:
        got = {b: phases.get("%s.%d" % (b, r)) for b in ROUND_PHASES}
        if None in got.values():
            continue
        per_round.append({"round": r, **{b: got[b]["rps"] for b in ROUND_PHASES},
                          **{"%s_%s" % (b, q): (got[b].get("latency_us") or {}).get(q)
                             for b in ("2", "3") for q in ("p50", "p99")},
                          **{"%s_steal" % b: got[b].get("steal_pct") for b in ("2", "3")},
                          "r21": ratio(got["2"]["rps"], got["1"]["rps"]),
                          "r23": ratio(got["2"]["rps"], got["3"]["rps"]),
                          "r13": ratio(got["1"]["rps"], got["3"]["rps"]),
                          "r10": ratio(got["1"]["rps"], got["0"]["rps"])})
    for b in ROUND_PHASES:
        runs = [phases["%s.%d" % (b, r)] for r in rounds if "%s.%d" % (b, r) in phases]
        if runs:
            runs.sort(key=lambda p: p.get("rps") or 0)
            shown = dict(runs[(len(runs) - 1) // 2])
            shown["id"], shown["rounds"] = b, [p["id"] for p in runs]
            phases[b] = shown
    last2 = phases.get("2.%d" % rounds[-1]) if rounds else phases.get("2")
    return per_round, last2


def fold_pair(phases, base, other):
    """Phase o's rounds, ids "on.1", "o1.1", ...: per-round ratios other/base,
    and the median round of each side shown under its bare id."""
    rounds = sorted({int(pid.split(".")[1]) for pid in phases if pid.split(".")[0] == base and "." in pid})
    ratios = [ratio(phases["%s.%d" % (other, r)]["rps"], phases["%s.%d" % (base, r)]["rps"])
              for r in rounds if "%s.%d" % (other, r) in phases]
    for b in (base, other):
        runs = sorted((phases[pid] for pid in list(phases) if pid.split(".")[0] == b and "." in pid),
                      key=lambda p: p.get("rps") or 0)
        if runs:
            shown = dict(runs[(len(runs) - 1) // 2])
            shown["id"], shown["rounds"] = b, [p["id"] for p in runs]
            phases[b] = shown
    return ratios


def per_request_us(phase, key):
    """A phase's CPU figure (seconds) per request, in microseconds."""
    if not phase or phase.get(key) is None or not phase.get("requests"):
        return None
    return phase[key] * 1e6 / phase["requests"]


def server_budget_us(meta, reference_rps, phase, floor=0.80):
    """The server CPU per request that would let PHASE reach FLOOR x the
    pgbench reference on this machine, if the machine's cores are what
    limits throughput (they are here: 87-98% busy in every phase):
    cores / (floor x reference req/s), less what PostgreSQL and the load
    tool spent per request of that same phase."""
    pg, tool = per_request_us(phase, "pg_cpu_s"), per_request_us(phase, "tool_cpu_s")
    try:
        cores = int(meta["nproc"])
    except (KeyError, TypeError, ValueError):
        return None
    if not reference_rps or pg is None or tool is None:
        return None
    return cores * 1e6 / (floor * reference_rps) - pg - tool


def table(workdir, out):
    meta, phases, purge = load(workdir)
    per_round, last2 = fold_rounds(phases)
    outbox_off = fold_pair(phases, "on", "o1")
    outbox_on = fold_pair(phases, "sn", "s1")

    def get(pid, *path):
        v = phases.get(pid)
        for k in path:
            if v is None:
                return None
            v = v.get(k)
        return v

    rows = [
        ("0", "plain: pgbench, the keyless INSERT (-M prepared)"),
        ("1", "limit: pgbench, same SQL (-M prepared)"),
        ("1x", "  pgbench, no cached plans (-M extended)"),
        ("2", "idempotent, fresh key per request"),
        ("2t", "  the same over TLS to loopback"),
        ("1t", "  limit over TLS to loopback (pgbench)"),
        ("3", "naive, no key"),
        ("4", "replay of a completed key"),
        ("7", "refund, fresh key per request"),
        ("8", "idempotent, the card network in the path"),
        ("9", "idempotent, network at 50 ms, POOL_SIZE=10"),
        ("5a", "idempotent, %s expired keys in table" % f"{meta['seed_rows']:,}"),
        ("5b", "idempotent while purging those keys"),
        ("6", "idempotent, RSS run"),
        ("on", "outbox: no endpoint, sender off"),
        ("o1", "outbox: one endpoint, sender off"),
        ("sn", "outbox: no endpoint, sender on"),
        ("s1", "outbox: one endpoint, sender on, delivering"),
        ("h", "GET /healthz: HTTP alone, no database"),
        ("r", "GET /readyz: HTTP + one pooled SELECT 1"),
    ]

    lines = []
    w = lines.append
    w("")
    w("charges bench: %s build of %s, %s" % (meta["profile"], meta["commit"], meta["started_at"]))
    w("machine: %s cores (%s), %s GiB RAM, %s%% steal during the run; %s; fsync=%s synchronous_commit=%s"
      " shared_buffers=%s; the server's connections: ssl=%s"
      % (meta["nproc"], meta["cpu"], meta["mem_gib"], meta.get("steal_pct", "?"), meta["pg_version"],
         meta["pg_fsync"], meta["pg_synchronous_commit"], meta["pg_shared_buffers"],
         meta.get("pg_ssl", "?")))
    w("transport to PostgreSQL: %s (server, pgbench and psql alike; 2t and 1t: TLS)"
      % meta.get("transport", "tcp, libpq default"))
    w("server: DEMO=false POOL_SIZE=%s WORKERS=%s POOL_TIMEOUT=%s; load: wrk %s threads, pgbench -j %s;"
      " %s s per phase after %s s warm-up, %s rounds of 3-1-0-2; load average at start %s"
      % (meta["pool_size"], meta["workers"], meta["pool_timeout"], meta["threads"], meta["threads"],
         meta["duration_s"], meta["warmup_s"], meta.get("rounds", 1), meta["loadavg_start"]))
    w("")
    hdr = "%-3s %-44s %7s %10s %9s %9s %9s %8s %7s" % (
        "#", "phase", "clients", "req/s", "p50 ms", "p90 ms", "p99 ms", "RSS MiB", "errors")
    w(hdr)
    w("-" * len(hdr))
    for pid, label in rows:
        p = phases.get(pid)
        if p is None:
            continue
        lat = p.get("latency_us", {})
        rss = p.get("rss_hwm_kib")
        w("%-3s %-44s %7d %10s %9s %9s %9s %8s %7d" % (
            pid, label, p["clients"], fmt(p.get("rps"), ",.1f"),
            fmt(ms(lat.get("p50")), ".2f"), fmt(ms(lat.get("p90")), ".2f"),
            fmt(ms(lat.get("p99")), ".2f"),
            fmt(None if rss is None else rss / 1024.0, ".1f"), p.get("errors_total", 0)))
    n_rounds = len((phases.get("2") or {}).get("rounds", []))
    if n_rounds > 1:
        w("(1, 2, 3: the median of %d rounds, shown below)" % n_rounds)
    w("")
    hdr = "%-3s %-44s %10s %10s %10s %8s %8s" % (
        "#", "where the CPU went, per request", "server us", "pg us", "tool us", "other", "load1")
    w(hdr)
    w("-" * len(hdr))
    for pid, label in rows:
        p = phases.get(pid)
        if p is None:
            continue
        n = p.get("requests") or 0
        hz = p.get("hz") or 100
        total = p.get("machine_total_ticks")
        busy = p.get("machine_busy_ticks")
        srv, pg, tool = p.get("server_cpu_s"), p.get("pg_cpu_s"), p.get("tool_cpu_s")
        pg_n = n
        if p.get("tool") == "pgbench" and p.get("pg_window_s") and p.get("rps"):
            # sampled over the middle of the run only: per transaction of that window
            pg, pg_n = p.get("pg_window_cpu_s"), p["rps"] * p["pg_window_s"]
        other = None
        if total and busy is not None and None not in (srv, pg, tool) and p.get("tool") == "wrk":
            # what the machine did besides this phase's server, pool backends and load tool
            other = max(0.0, busy / hz - srv - pg - tool) / (total / hz)

        def per(v, k=n):
            return fmt(None if v is None or not k else v * 1e6 / k, ",.0f")
        w("%-3s %-44s %10s %10s %10s %8s %8s" % (
            pid, label, per(srv), per(pg, pg_n), per(tool),
            fmt(None if other is None else other * 100, ".0f") + ("%" if other is not None else ""),
            fmt(p.get("loadavg"), ".2f")))
    w("(server: the charges process; pg: the PostgreSQL backends of its pool, or of pgbench in 1/1x"
      " (sampled mid-run);")
    w(" tool: wrk or pgbench, plus the purge's psql in 5b; other: share of the machine's CPU used by"
      " anything else meanwhile,")
    w(" incl. the purge's backend in 5b; load1: load average at the end of the phase)")
    w("")
    if meta.get("seed_seconds") is not None:
        w("seed: %s key rows + their charges inserted in %.1f s (INSERT ... SELECT generate_series),"
          " then VACUUM ANALYZE + CHECKPOINT in %.1f s"
          % (f"{meta['seed_rows']:,}", meta["seed_seconds"], meta["vacuum_seconds"]))
    if purge:
        w("purge (%s): %s expired rows deleted in %.2f s = %s rows/s, batches of %s, %s batches,"
          " concurrent with 5b%s" % (
              purge["method"], f"{purge['deleted']:,}", purge["seconds"],
              fmt(purge["rows_per_s"], ",.0f"), purge["batch"] or "the app's default",
              fmt(purge["batches"], "d", "?"),
              "; backlog cleared" if purge.get("remaining", 1) == 0 else
              "; %s left when the time ran out" % f"{purge['remaining']:,}"))
    w("")

    fo = meta.get("failover")
    if fo and "skipped" not in fo:
        w("failover (pg_auto_failover; kill -9 of the primary's postgres and keeper under load, the monitor"
          " promotes its synchronous secondary): first new 201 %.2f s after the kill; %s non-2xx (503) of %s"
          " requests meanwhile, %s socket errors"
          % (fo["kill_to_first_201_s"], fo.get("non_2xx"), fo.get("requests"), fo.get("socket_errors")))
        w("")
    elif fo:
        w("failover: skipped (%s)" % fo["skipped"])
        w("")

    ob = meta.get("outbox")
    if outbox_off or outbox_on:
        w("outbox rounds (the two sides back to back, the first alternating)  %s" % " ".join(
            "%10s" % ("round %d" % (i + 1)) for i in range(max(len(outbox_off), len(outbox_on)))))
        for label, vals in (("o1/on  one endpoint / none, sender off", outbox_off),
                            ("s1/sn  one endpoint / none, sender on", outbox_on)):
            w("%-66s %s   median %s" % (label, " ".join("%10s" % fmt(v, ".3f") for v in vals),
                                        fmt(median(vals), ".3f")))
        if ob:
            w("s1's deliveries: %d (%d succeeded, %d pending, %d failed), %d attempts; first attempt after"
              " the event's commit: p50 %s ms, p99 %s ms" % (
                  ob["deliveries"], ob["succeeded"], ob["pending"], ob["failed"], ob["attempts"],
                  fmt(ob["lag_first_attempt_ms"]["p50"], ".0f"), fmt(ob["lag_first_attempt_ms"]["p99"], ".0f")))
            for d in ob.get("drains", []):
                w("  %s: %d delivered when wrk stopped; the rest drained in %d s, %d left" % (
                    d["id"], d["succeeded_at_wrk_end"], d["drain_s"], d["left"]))
        w("")
    if per_round:
        w("rounds (each one: 3, 1, 0, then 2)    %s %10s" % (
            " ".join("%10s" % ("round %d" % r["round"]) for r in per_round), "median"))
        for key, label, spec in [("0", "0  plain SQL req/s", ",.0f"), ("1", "1  limit req/s", ",.0f"),
                                 ("2", "2  idempotent req/s", ",.0f"),
                                 ("3", "3  naive req/s", ",.0f"), ("r21", "2/1", ".2f"),
                                 ("r23", "2/3", ".2f"), ("r10", "1/0: keyed SQL / plain SQL", ".2f"),
                                 ("r13", "1/3", ".2f")]:
            vals = [r[key] for r in per_round]
            w("%-37s %s %10s" % (label, " ".join("%10s" % fmt(v, spec) for v in vals),
                                 fmt(median(vals), spec)))
        # p50 and p99 of each round, so that an outlier shows instead of
        # being averaged away; '!' marks a p99 over 20x its p50.
        for b in ("2", "3"):
            for q in ("p50", "p99"):
                vals = [r["%s_%s" % (b, q)] for r in per_round]
                marks = ["!" if q == "p99" and r["%s_p99" % b] and r["%s_p50" % b]
                         and r["%s_p99" % b] > 20 * r["%s_p50" % b] else " " for r in per_round]
                w("%-37s %s" % ("%s  %s ms" % (b, q), " ".join(
                    "%9s%s" % (fmt(ms(v), ".2f"), m) for v, m in zip(vals, marks))))
            w("%-37s %s" % ("%s  steal %%" % b, " ".join(
                "%10s" % fmt(r["%s_steal" % b], ".1f") for r in per_round)))
        outliers = ["round %d phase %s (p99 %.1f ms = %.0fx p50, steal %s%%)" % (
            r["round"], b, ms(r["%s_p99" % b]), r["%s_p99" % b] / r["%s_p50" % b],
            fmt(r["%s_steal" % b], ".1f")) for r in per_round for b in ("2", "3")
            if r["%s_p99" % b] and r["%s_p50" % b] and r["%s_p99" % b] > 20 * r["%s_p50" % b]]
        w("outliers: %s" % ("; ".join(outliers) if outliers else "none (no round's p99 over 20x its p50)"))
        w("(1/0: what PostgreSQL alone does with the keyed statement next to the plain INSERT, with")
        w(" no HTTP, JSON or pool in front: the ceiling of 2/3 if the server cost nothing per request)")
        w("")
        r21 = median(r["r21"] for r in per_round)
        r23 = median(r["r23"] for r in per_round)
        r13 = median(r["r13"] for r in per_round)
        r10 = median(r["r10"] for r in per_round)
    else:
        r21 = ratio(get("2", "rps"), get("1", "rps"))
        r23 = ratio(get("2", "rps"), get("3", "rps"))
        r13 = ratio(get("1", "rps"), get("3", "rps"))
        r10 = ratio(get("1", "rps"), get("0", "rps"))
    r42 = ratio(get("4", "rps"), get("2", "rps"))
    r30 = median(ratio(r["3"], r["0"]) for r in per_round) if per_round else ratio(get("3", "rps"), get("0", "rps"))
    r2t = ratio(get("2t", "rps"), (last2 or {}).get("rps"))
    r2t1t = ratio(get("2t", "rps"), get("1t", "rps"))
    cpu2 = per_request_us(phases.get("2"), "server_cpu_s")
    cpu3 = per_request_us(phases.get("3"), "server_cpu_s")
    cpuh = per_request_us(phases.get("h"), "server_cpu_s")
    cpur = per_request_us(phases.get("r"), "server_cpu_s")
    budget21 = server_budget_us(meta, get("1", "rps"), phases.get("2"))
    budget30 = server_budget_us(meta, get("0", "rps"), phases.get("3"))
    r73 = ratio(get("7", "rps"), get("3", "rps"))
    r82 = ratio(get("8", "rps"), (last2 or {}).get("rps"))
    slow_network_rps = get("9", "rps")
    # 5a runs right after the last round's 2: the closest empty-table figure.
    rp99 = ratio(get("5a", "latency_us", "p99"), (last2 or {}).get("latency_us", {}).get("p99"))
    rss6 = get("6", "rss_hwm_kib")
    rss6 = None if rss6 is None else rss6 / 1024.0
    purge_rps = (purge or {}).get("rows_per_s")
    targets = [
        ("first keyed / plain charge, both via the server (2/3)", r23, ">=", 0.50, ".2f", ""),
        ("  ceiling: keyed SQL / plain SQL, both pgbench (1/0)", r10, "info", None, ".2f", ""),
        ("first keyed / pgbench of the same transaction (2/1)", r21, ">=", 0.80, ".2f", ""),
        ("plain charge via the server / pgbench plain INSERT (3/0)", r30, ">=", 0.80, ".2f", ""),
        ("  server CPU per first keyed charge (2)", cpu2, "info", None, ",.0f", " us"),
        ("    at most, for 2/1 >= 0.80 (budget, bench/README.md)", budget21, "info", None, ",.0f", " us"),
        ("  server CPU per plain charge (3)", cpu3, "info", None, ",.0f", " us"),
        ("    at most, for 3/0 >= 0.80 (budget)", budget30, "info", None, ",.0f", " us"),
        ("  server CPU per GET /healthz, no database (h)", cpuh, "info", None, ",.0f", " us"),
        ("  server CPU per GET /readyz, one pooled SELECT 1 (r)", cpur, "info", None, ",.0f", " us"),
        ("  first keyed over TLS / on %s (2t/2, last round)" % meta.get("transport", "?"), r2t, "info", None,
         ".2f", ""),
        ("  first keyed over TLS / pgbench over TLS (2t/1t)", r2t1t, "info", None, ".2f", ""),
        ("  first refund / plain charge (7/3)", r73, "info", None, ".2f", ""),
        ("  with the card network / without (8/2, last round)", r82, "info", None, ".2f", ""),
        ("  old ceiling, a connection held across the network: POOL_SIZE 10 / 50 ms", 200.0, "info", None,
         ",.0f", ""),
        ("charges/s, network at 50 ms, 64 clients, POOL_SIZE=10 (9)", slow_network_rps, ">=", 600.0, ",.0f",
         "/s"),
        ("replay / idempotent (4/2)", r42, ">=", 2.0, ".2f", ""),
        ("p99 with %s keys / empty p99 (5a/2, last round)" % f"{meta['seed_rows']:,}", rp99, "<=", 1.2,
         ".2f", ""),
        ("server peak RSS at %d clients (6)" % (get("6", "clients") or 0), rss6, "<", 64.0, ".1f", " MiB"),
        ("purge while serving (5b)", purge_rps, ">=", 50000.0, ",.0f", " rows/s"),
        ("first keyed, one endpoint / none, sender off (o1/on)", median(outbox_off), ">=", 0.85, ".2f", ""),
        ("  the same, the sender on and delivering (s1/sn)", median(outbox_on), "info", None, ".2f", ""),
        ("  s1's delivery lag, first attempt after commit, p50", ((ob or {}).get("lag_first_attempt_ms") or {})
         .get("p50"), "info", None, ",.0f", " ms"),
        ("  s1's delivery lag, first attempt after commit, p99", ((ob or {}).get("lag_first_attempt_ms") or {})
         .get("p99"), "info", None, ",.0f", " ms"),
    ]
    hdr = "%-55s %12s %12s  %s" % ("target", "measured", "target", "result")
    w(hdr)
    w("-" * len(hdr))
    results = []
    for name, val, op, lim, spec, unit in targets:
        if op == "info":
            w("%-55s %12s" % (name, fmt(val, spec)))
            continue
        if val is None:
            res = "n/a"
        elif op == ">=":
            res = "PASS" if val >= lim else "MISS"
        elif op == "<=":
            res = "PASS" if val <= lim else "MISS"
        else:
            res = "PASS" if val < lim else "MISS"
        w("%-55s %12s %12s  %s" % (name, fmt(val, spec) + (unit if val is not None else ""),
                                  "%s %s%s" % (op, format(lim, spec), unit), res))
        results.append({"target": name, "measured": val, "op": op, "limit": lim, "result": res})
    if meta.get("quick"):
        w("")
        w("(--quick: %s s phases and %s seeded rows only check that the bench runs end to end;"
          " the figures are not meaningful)" % (meta["duration_s"], f"{meta['seed_rows']:,}"))
    w("")
    text = "\n".join(lines)
    print(text)

    doc = {
        "meta": meta,
        "phases": phases,
        "purge": purge,
        "rounds": per_round,
        "ratios": {"idempotent_over_limit": r21, "idempotent_over_naive": r23, "limit_over_naive": r13,
                   "limit_over_plain_sql": r10,
                   "replay_over_idempotent": r42, "refund_over_naive": r73,
                   "network_over_idempotent": r82, "naive_over_plain_sql": r30,
                   "tls_over_idempotent": r2t, "tls_idempotent_over_tls_limit": r2t1t,
                   "slow_network_charges_per_s": slow_network_rps,
                   "p99_1m_over_empty": rp99,
                   "outbox_one_endpoint_over_none_sender_off": median(outbox_off),
                   "outbox_one_endpoint_over_none_sender_on": median(outbox_on)},
        "outbox": {"rounds_sender_off": outbox_off, "rounds_sender_on": outbox_on, "deliveries": ob},
        "server_cpu_us": {"first_keyed": cpu2, "plain": cpu3, "healthz": cpuh, "readyz": cpur,
                          "budget_first_keyed_for_2_over_1": budget21,
                          "budget_plain_for_3_over_0": budget30},
        "targets": results,
        "table": text,
    }
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(doc, f, indent=2, sort_keys=True)
        f.write("\n")
    print("results written to %s" % out)


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "wrk":
        wrk_phase(args[0], args[1], args[2:])
    elif cmd == "pgbench":
        pgbench_phase(args[0], args[1], args[2], args[3:])
    elif cmd == "meta":
        with open(args[0], "w") as f:
            json.dump(extras(args[1:]), f, indent=2, sort_keys=True)
    elif cmd == "table":
        table(args[0], args[1])
    else:
        sys.exit("report.py: unknown command %r" % cmd)


if __name__ == "__main__":
    main()
