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
LEVEL = " training reaches the theorem's level: min attention >= 1 - exp("


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
    text = (
        f"**2. {TITLE}** {answer} The closed-form kernel keeps the theorem's symmetric subspace (v2 = 0, W's "
        "cross blocks 0) exactly; other training keeps it only up to rounding, and the rounding grows while "
        f"attention forms. Against the theorem's level, min attention >= 1 - exp(-{c:g} D) after "
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
    return text + (f"\n{stable}" if stable else "")


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
