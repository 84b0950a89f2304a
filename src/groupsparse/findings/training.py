"""Question 2: what does ordinary training (autograd, float32, a perturbed start) do at large D?

Read from the theorem config's stability runs (configs/theorem.yaml, `scaling.stability`; claims
of the analysis `stability_by_D`): per variant and D, does the run reach the theorem's level, and
what does it learn instead; then the population study's plain batch gradient descent at a stable
step size (configs/population.yaml, `scaling.stability`) against the same kind of level.
"""

from __future__ import annotations

from .tables import FindingsError, Sources, Tables, interval, listing, num, span, steps

TITLE = "What does ordinary training do at large D?"
STUDY = "theorem"
POPULATION = "population"
# configs/practitioners.yaml's slices that ran (their D levels together; a D in two slices is the same run)
PRACTITIONERS = ("practitioners_small_D", "practitioners_D16", "practitioners_D24_stable", "practitioners_D24")
FULL = "configs/practitioners.yaml"  # the sweep they are slices of
LEVEL = " training reaches the theorem's level: min attention >= 1 - exp("
# what the practitioners' table shows per run beside min attention (the claims' stability_by_D rows)
DESCRIBED = ("mean attention on j*", "|v2| / |v1|", "|W cross blocks| / |W diagonal blocks|", "eval loss")


def _level(s: Sources, variant: str, c: float, D: int):
    return s.claim(f"{variant}{LEVEL}-{c:g} D) (D = {D})")


def _described(s: Sources, variant: str, D: int, d: int, what: str):
    return s.claim(f"{variant} training at D = {D}: {what} at the last step (d = {d})")


def _reach(s: Sources, variant: str, c: float, Ds: list[int]) -> tuple[int | None, list[int]]:
    """(largest D up to which every D reaches the level, the D's that do not)."""
    verdicts = {D: _level(s, variant, c, D)["verdict"] for D in Ds}
    failed = [D for D in Ds if verdicts[D] != "holds"]
    upto = max([D for D in Ds if all(verdicts[E] == "holds" for E in Ds if E <= D)], default=None)
    return upto, failed


def _variant_words(name: str, spec: dict) -> str:
    """'plain autograd in float32 from the zero start' from a stability variant's settings."""
    model, pre = spec.get("model") or {}, spec.get("pretrain") or {}
    dtype = spec.get("dtype", "")
    if model.get("init") == "random":
        scale = f"{model.get('init_scale', 0):g}".replace("e-0", "e-")
        return f"a {scale} random start with the exact (closed-form) gradient in {dtype}"
    if pre.get("gradient") == "autograd":
        return f"plain autograd in {dtype} from the zero start"
    return name


def finding(studies: dict[str, Tables]) -> str:
    t = studies[STUDY]
    s = Sources(t)
    stab = s.config["scaling"]["stability"]
    d, Ds = stab["d"], list(s.config["scaling"]["D_grid"])
    c = min(s.config["scaling"]["analysis"]["target_c"])
    parts, failing, ratios, losses = [], {}, [], []
    for name, spec in stab["variants"].items():
        upto, failed = _reach(s, name, c, Ds)
        failing[name] = failed
        words = _variant_words(name, spec)
        if not failed:
            parts.append(f"{words} (`{name}`) reaches it at every D")
            continue
        first, last = failed[0], failed[-1]
        where = f"up to D = {upto}" if upto is not None else "at no D"
        detail = f"{interval(_level(s, name, c, first))} at D = {first}"
        if last != first:
            detail += f", {num(_level(s, name, c, last)['measured'])} at D = {last}"
        parts.append(f"{words} (`{name}`) reaches it {where} and fails from D = {first} ({detail})")
        for D in failed:
            ratios.append(_described(s, name, D, d, "|v2| / |v1|")["measured"])
            losses.append(_described(s, name, D, d, "eval loss")["measured"])
    stopped = any(failing.values())
    stable, stable_reaches = _at_stable_step(studies, c)
    eta = (s.config["scaling"].get("pretrain") or {}).get("eta", s.config["pretrain"]["eta"])
    answer = "It stops selecting." if stopped else "It selects like the closed form."
    if stopped and stable and stable_reaches:
        answer = (
            f"At the paper's step size eta = {eta:g} it stops selecting at large D; at a stable step size "
            "plain batch gradient descent reaches the population study's level at every D it was run (last bullet: "
            "its level and flow time differ from the ones below)."
        )
    attention = ""
    if stopped:
        name, D = next((n, f[-1]) for n, f in failing.items() if f)
        share = _described(s, name, D, d, "mean attention on j*")["measured"]
        attention = f"; at D = {D}, `{name}` puts {num(share)} of the attention on j*"
    practitioners = _practitioner_runs(studies)  # configs/practitioners.yaml's slices, read once
    text = (
        f"**2. {TITLE}** {answer}{_step_size_contrast(practitioners)} The closed-form kernel keeps the theorem's "
        "symmetric subspace (v2 = 0, W's cross blocks 0) exactly; other training keeps it only up to rounding, "
        "and the rounding grows while attention forms. Against the theorem's level, min attention >= 1 - "
        f"exp(-{c:g} D) after "
        f"{steps(stab['steps_per_D3'])} ({stab['seeds']} seeds, d = {d}, every D of the grid, eta = {eta:g}, past "
        "the stability edge 8/D for D > 16): " + "; ".join(parts) + f"{attention}."
    )
    if ratios:
        text += (
            f" Where it fails, |v2| / |v1| is {span(ratios, 1, ' to ')} while the eval loss stays low "
            f"({span(losses, 3, ' to ')}): the model solves the task through position terms instead of "
            "attending to j*."
            + (
                ""
                if stable_reaches
                else " The theorem's solution is reachable at large D only with the exact symmetry."
            )
        )
    text += f" {s.cite()[:-1]}, `scaling.stability`)"
    return text + (f"\n{stable}" if stable else "") + _practitioners(practitioners)


def _setting(spec: dict, eta: float) -> str:
    """'autograd, 0.01 start, separate W_K/W_Q, eta = min(0.5, 6/D)' from a practitioners' variant."""
    model, pre = spec.get("model") or {}, spec.get("pretrain") or {}
    words = ["Adam" if pre.get("optimizer") == "adam" else "autograd GD"]
    words.append(f"N(0, {model['init_scale']:g}^2) start" if model.get("init") == "random" else "zero start")
    if model.get("attention") == "separate":
        words.append("separate W_K, W_Q")
    if pre.get("sampling") == "iid":
        words.append("i.i.d. batches")
    step = pre.get("eta", eta)
    if pre.get("optimizer") == "adam":
        words.append(f"lr {step:g}, {spec.get('steps_per_D3'):g} D^3 steps")
    elif pre.get("eta_D_limit"):
        words.append(f"eta = min({step:g}, {pre['eta_D_limit']:g}/D)")
    else:
        words.append(f"eta = {step:g}")
    return ", ".join(words)


def _not_run(root, cells: dict[str, dict[int, str]]) -> str:
    """'; not run here (a cluster's: `configs/cluster/practitioners_D32.yaml`): D = 32 for every variant', from the
    full config, naming the cluster overlays that plan the missing runs."""
    import yaml

    path = root / FULL
    if not path.is_file():
        return ""
    grid = yaml.safe_load(path.read_text())["scaling"]
    planned = {n: v.get("D_grid", grid["D_grid"]) for n, v in grid["stability"]["variants"].items()}
    missing = {D: [n for n, Ds in planned.items() if D in Ds and D not in cells.get(n, {})] for D in grid["D_grid"]}
    parts = []
    for D, names in missing.items():
        at = [n for n, Ds in planned.items() if D in Ds]
        if names:
            parts.append(
                f"D = {D} for " + ("every variant" if len(names) == len(at) else f"{len(names)} of the {len(at)}")
            )
    if not parts:
        return ""
    overlays = [  # the cluster overlays (configs/cluster/) that plan some of the missing runs
        f"`{o.relative_to(root)}`"
        for o in sorted((root / "configs/cluster").glob("*.yaml"))
        if any(
            D in (v or {}).get("D_grid", [])
            for n, v in ((yaml.safe_load(o.read_text()) or {}).get("scaling", {}).get("stability", {}))
            .get("variants", {})
            .items()
            for D, names in missing.items()
            if n in names
        )
    ]
    return f"; not run here (a cluster's{': ' + ', '.join(overlays) if overlays else ''}): {', '.join(parts)}"


def _practitioner_runs(studies: dict[str, Tables]):
    """Per variant and D, from the slices of configs/practitioners.yaml that ran: the table's cell and the
    verdict (a D in two slices is the same run: the first slice's)."""
    ran = [Sources(studies[name]) for name in PRACTITIONERS if name in studies]
    cells: dict[str, dict[int, str]] = {}
    verdicts: dict[str, dict[int, str]] = {}
    losses: dict[str, dict[int, float]] = {}  # eval loss per variant and D (the Adam rule reads it)
    settings, rules, configs = {}, {}, []
    c = None
    for s in ran:
        grid, stab = s.config["scaling"], s.config["scaling"]["stability"]
        c, d = min(grid["analysis"]["target_c"]), stab["d"]
        eta = (grid.get("pretrain") or {}).get("eta", s.config["pretrain"]["eta"])
        before = {D for row in cells.values() for D in row}  # levels an earlier slice ran
        for name, spec in stab["variants"].items():
            settings.setdefault(name, _setting(spec, eta))
            limit = (spec.get("pretrain") or {}).get("eta_D_limit")
            if limit:
                rules.setdefault(name, f"min({(spec.get('pretrain') or {}).get('eta', eta):g}, {limit:g}/D)")
            for D in spec.get("D_grid", grid["D_grid"]):
                if D in cells.get(name, {}):
                    continue  # the same run in an earlier slice
                level = _level(s, name, c, D)
                shown = {what: _described(s, name, D, d, what)["measured"] for what in DESCRIBED}
                losses.setdefault(name, {})[D] = shown["eval loss"]
                cells.setdefault(name, {})[D] = (
                    f"{interval(level)} {level['verdict']}; {num(shown['mean attention on j*'])}; "
                    f"{num(shown['|v2| / |v1|'], 2)} / {num(shown['|W cross blocks| / |W diagonal blocks|'], 2)}; "
                    f"{num(shown['eval loss'])}"
                )
                verdicts.setdefault(name, {})[D] = level["verdict"]
        added = sorted({D for row in cells.values() for D in row} - before)
        if added or not configs:
            configs.append([f"D = {listing(added)}" if added else "", [f"`{s.t.config_file}`"]])
        else:  # more variants at levels an earlier slice ran: named beside that slice
            configs[-1][1].append(f"`{s.t.config_file}`")
    configs = [f"{Ds} ({', '.join(files)})" if Ds else ", ".join(files) for Ds, files in configs]
    return ran, cells, verdicts, settings, rules, configs, c, losses


# configs/practitioners.yaml's rule, fixed before its runs: of the Adam variants, the tuned one has the lower
# mean eval loss at this D
ADAM_TUNED_AT = 8


def _tuned_adam(runs) -> str:
    """' The tuned Adam by the config's rule ...: `adam_0p01` (eval loss 0.023 against 0.073).' ('' without
    two Adam variants at D = ADAM_TUNED_AT)."""
    losses = runs[7]
    adam = {n: by[ADAM_TUNED_AT] for n, by in losses.items() if n.startswith("adam") and ADAM_TUNED_AT in by}
    if len(adam) < 2:
        return ""
    best = min(adam, key=adam.get)
    others = ", ".join(f"`{n}` {num(v)}" for n, v in sorted(adam.items()) if n != best)
    return (
        f" The tuned Adam, by `{FULL}`'s rule (fixed with the config: the lower mean eval loss at D = "
        f"{ADAM_TUNED_AT}): `{best}` (eval loss {num(adam[best])}; {others})."
    )


def _counted(verdicts: dict[str, str]) -> str:
    """'2 hold (`zero_etaD`, `iid_etaD`), 1 does not hold (`separate_etaD`)' from {variant: verdict}."""
    words = {"holds": ("holds", "hold"), "does not hold": ("does not hold", "do not hold")}
    parts = []
    for verdict in ("holds", "undecided", "inconclusive", "does not hold"):
        names = [f"`{n}`" for n, v in verdicts.items() if v == verdict]
        if names:
            one, many = words.get(verdict, (verdict, verdict))
            parts.append(f"{len(names)} {one if len(names) == 1 else many} ({', '.join(names)})")
    return ", ".join(parts)


def _step_size_contrast(runs) -> str:
    """'at D = 16, eta = 0.5: 1 holds, 3 do not hold; eta(D): 2 hold, ...' from :func:`_practitioner_runs`: the
    practitioners' sweep at the D's where its two step sizes differ (`<start>_eta05` against `<start>_etaD`)."""
    ran, _, verdicts, _, rules, _, c, _ = runs
    if not ran:
        return ""
    pairs = [(n, n[: -len("_eta05")] + "_etaD") for n in verdicts if n.endswith("_eta05")]
    parts = []
    for D in sorted({D for _, slow in pairs for D in verdicts.get(slow, {})}):
        fast = {f: verdicts[f][D] for f, _ in pairs if D in verdicts[f]}
        slow = {s: verdicts[s][D] for _, s in pairs if D in verdicts.get(s, {})}
        told = f"at D = {D}, " + (f"eta = 0.5: {_counted(fast)}; " if fast else "")
        parts.append(told + f"eta(D): {_counted(slow)}" + ("" if fast else " (eta = 0.5 not run there)"))
    if not parts:
        return ""
    rule = next((rules[s] for _, s in pairs if s in rules), "eta(D)")
    return (
        f" In the practitioners' sweep (below; eta(D) = {rule}), where the two step sizes differ, the "
        f"variants against min attention >= 1 - exp(-{c:g} D): " + "; ".join(parts) + "."
    )


def _practitioners(runs) -> str:
    """configs/practitioners.yaml's variants per D, from the slices that ran (:func:`_practitioner_runs`): min
    attention at the last step against the theorem's level (its verdict) and the DESCRIBED quantities, one
    row per variant."""
    ran, cells, _, settings, _, configs, c, _ = runs
    if not ran:
        return ""
    Ds = sorted({D for row in cells.values() for D in row})
    family = ("zero", "init", "separate", "iid", "adam")  # the config's order: the plain start first
    order = sorted(cells, key=lambda n: (next((i for i, f in enumerate(family) if n.startswith(f)), 9), n))
    rows = [
        f"| `{name}`: {settings[name]} | " + " | ".join(cells[name].get(D, "–") for D in Ds) + " |" for name in order
    ]
    first = ran[0]
    stab = first.config["scaling"]["stability"]
    cites = " ".join(s.cite() for s in ran)
    return (
        f"\n- *Practitioners' training over D* (`{FULL}`, fixed before any run of it; the parts 2 cores afford "
        f"ran: {'; '.join(configs)}; d = {stab['d']}, {stab['seeds']} seeds, gradient descent to flow time "
        f"{stab['flow_time_per_D3']:g} D^3, batch {first.config['scaling']['pretrain']['batch']}). Per variant "
        f"and D, at the last step: min over queries of S[j*, j] [95% interval] against 1 - exp(-{c:g} D) (the "
        "verdict); the mean attention on j*; |v2| / |v1| and |W cross blocks| / |W diagonal blocks| (0 on the "
        f"theorem's subspace); the eval loss{_not_run(ran[0].t.root, cells)} {cites}:\n\n"
        + "\n".join(["| variant | " + " | ".join(f"D = {D}" for D in Ds) + " |", "|---|" + "---|" * len(Ds), *rows])
        + "\n"
        + (f"\n{tuned.strip()}\n" if (tuned := _tuned_adam(runs)) else "")
    )


def _at_stable_step(studies: dict[str, Tables], level_c: float) -> tuple[str, bool]:
    """The population study's plain batch gradient descent (no projection) at eta(D) = min(eta, limit / D)
    against the same level: ordinary training at a step size below the stability edge."""
    if POPULATION not in studies:
        return "", False
    s = Sources(studies[POPULATION])
    grid, stab = s.config["scaling"], s.config["scaling"].get("stability") or {}
    # the theorem study's level where this study has claims at it, else its own smallest c (its stability
    # claims are made there)
    claims = s.table("claims")["claim"].astype(str)
    has_level = claims.str.contains(f"{LEVEL}-{level_c:g} D)", regex=False).any()
    c = level_c if has_level else min(grid["analysis"]["target_c"])
    all_reach, parts = True, []
    for name, spec in (stab.get("variants") or {}).items():
        Ds = list(spec.get("D_grid") or grid["D_grid"])
        try:
            upto, failed = _reach(s, name, c, Ds)
        except FindingsError:
            continue  # a variant without these claims
        batch = (spec.get("pretrain") or {}).get("batch")
        all_reach = all_reach and not failed
        where = "at every D" if not failed else (f"up to D = {upto}" if upto is not None else "at no D")
        parts.append(
            f"batch-{batch} gradient descent reaches it {where} of D = {listing(Ds)}"
            + (f" (not at D = {listing(failed)})" if failed else "")
        )
    if not parts:
        return "", False
    pre = grid["pretrain"]
    text = (
        f"- *At a stable step size* (`{studies[POPULATION].config_file}`: plain batch gradient descent from the zero "
        f"start, closed-form gradient, no projection, eta(D) = min({pre['eta']:g}, {pre['eta_D_limit']:g}/D), flow "
        f"time {stab.get('flow_time_per_D3', grid['flow_time_per_D3']):g} D^3, {stab.get('seeds')} seeds, d = "
        f"{stab.get('d')}), against min attention >= 1 - exp(-{c:g} D) at the last step: "
        + "; ".join(parts)
        + f". {s.cite()}"
    )
    return text, all_reach


def summary(t: Tables) -> list[str]:
    """Per stability variant: up to which D it reaches the theorem's level."""
    level = t.claims("")
    if level.empty:
        return []
    level = level[level["claim"].astype(str).str.contains(LEVEL, regex=False)]
    if level.empty:
        return []
    lines = ["ordinary training against the theorem's level (min attention, last step):"]
    by: dict = {}
    for _, r in level.iterrows():
        variant, rest = r["claim"].split(LEVEL, 1)
        D = int(rest.rsplit("(D = ", 1)[1].rstrip(")"))
        by.setdefault(variant, []).append((D, r["verdict"]))
    for variant, rows in by.items():
        rows.sort()
        held = [D for D, v in rows if v == "holds"]
        failed = [D for D, v in rows if v != "holds"]
        lines.append(
            f"  {variant}: holds at D = {listing(held) if held else 'none'}"
            + (f"; not at D = {listing(failed)}" if failed else "")
        )
    return lines
