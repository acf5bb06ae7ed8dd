"""One benchmark run: every prompt x every repeat x every mode, interleaved.

For each prompt, for each repeat, every mode runs once in turn, so whatever the machine is
doing (other processes, thermal state) is shared by all modes rather than landing on one.
The mode order rotates by one position from one (prompt, repeat) group to the next, so no mode
always runs first after a prompt change. With `min_seconds` a prompt runs further repeats (up to
`max_repeats`) until standard's answers to it add up to that time: short answers get the
repeats their noise needs, long ones the `repeats` asked for. Before the measured runs, every
mode runs once on the first prompt with a few tokens (warm-up: lazy initialisation, allocator
growth, kernel choice); those runs are recorded separately and never enter the rows, tables or
figures.

Timings (all time.perf_counter, seconds):
  latency_s   end to end: chat template + tokenization -> generation -> final text
  ttft_s      from the same start to the first generated token being available
  generate_s  generation alone (our decoder's Stats.seconds; generate()'s wall time for hf)
  tokens_per_second         = new_tokens / generate_s (end-to-end: the prefill included)
  decode_tokens_per_second  = (new_tokens - 1) / (generate_s - time to the first token)
Both are Stats' own properties for our modes (the one definition the app shows too).
τ counts tokens per speculative step (Stats.tokens_per_speculative_step); a mode that proposes
nothing has none. `kinds` counts the tokens of each kind (no run holds more bonus tokens
than accepted ones: a bonus needs all of its step's k >= 1 proposals accepted).

A conversation (a prompt with `turns`) runs whole in each mode before the next mode starts:
the model answers each user turn, its answer goes into the chat, and every turn after the
first is decoded on the cache the previous turn left (as the app and `specdec serve` run a
chat; our modes keep both caches, the peers pay each turn's prefill as their own servers
would without a prompt cache). Each turn is a record of its own, `<id>#<turn>`, in category
`conversation` (the first turn), `conversation-code` (a later turn whose answer holds a code
block: code and edits) or `conversation-prose` (a later turn in prose), decided by standard's
answer in the first repeat so every mode and repeat of a turn lands in the same category.

A first turn (and a single-turn prompt) starts, in our modes, from the caches with nothing but
the chat template's head -- Qwen's system prompt and the user's turn opener, 24 tokens -- which
every chat shares: a new chat in the app finds it cached by the chat before it, or by the
worker's read after loading (app/worker.py), for the target and the draft alike. The rest of the
prompt, even where the run before had the same prompt, is paid in full. `head_tokens=None`
(`specdec bench --cold-start`) pays the whole prompt, the template's head too, as the very first
message of a process that read nothing does.

Between a conversation's turns our speculative modes let the draft read what its windows skipped
(Engine.read_ahead), as the app's worker does while the user reads the answer and types the next
message: that read is not in the next turn's time (no user waits for it) and is recorded beside
it (idle_read_seconds, idle_read_tokens). `read_ahead=False` (`specdec bench --no-read-ahead`)
measures later turns without it, as a client that sends its turns back to back gets them.

`read_while_writing` (`specdec bench --read-while-writing`): a single-turn prompt's message up to
its last paragraph -- the document, code or text the question under it is about -- is read by
the target and then the draft before the send (Engine.read_prompt), in our modes, from caches
that hold the template's head only: what the app does while the user writes the question under
an attachment. The reads are not in the send's time (no user waits for them) and are recorded
beside it (the target's prompt_read_ahead_seconds and _tokens, the draft's in idle_read_*).
"""

from __future__ import annotations

import gc
import sys
import time
from dataclasses import dataclass

from ..grammar.spec import GrammarSpec
from ..settings import DecodeSettings
from .modes import HF_ASSISTED, LLAMACPP, LLAMACPP_SPEC, STANDARD, Mode
from .prompts import BenchPrompt

CONVERSATION = "conversation"

@dataclass(frozen=True)
class RunSettings:
    """The decoding settings every mode shares (each mode sets its own mode, proposer and k;
    each repeat its own seed), and how often and how long to run."""

    decode: DecodeSettings
    repeats: int = 1
    warmup_tokens: int = 16
    # first turns keep at most this many cached prompt tokens: the template's head (module
    # docstring); None: none (a server, or --cold-start)
    head_tokens: int | None = None
    # between a conversation's turns the draft reads what it skipped (module docstring)
    read_ahead: bool = True
    # a single-turn prompt's message but its last paragraph is read before the send (module docstring)
    read_while_writing: bool = False
    # a prompt runs more repeats (all modes, the order still rotating), up to max_repeats, until
    # standard's answers (else the first mode's) add up to min_seconds: a 1-second answer's
    # ratio from one run moves +-15% with the machine (speed notes, item 121); 0: `repeats`
    min_seconds: float = 0.0
    max_repeats: int = 8


def run_suite(engine, prompts, modes: list[Mode], settings: RunSettings, memory, hf=None,
              progress: bool = True, near_tie: float = 1e-2, llama=None) -> dict:
    """-> {"runs": [record, ...], "warmup": [record, ...]}; records are plain dicts."""
    from tqdm import tqdm

    warm = [m for m in modes] if settings.warmup_tokens > 0 else []
    total = len(warm) + len(prompts) * settings.repeats * len(modes)
    bar = tqdm(total=total, desc="bench", unit="run", file=sys.stderr, dynamic_ncols=True,
               disable=not progress, mininterval=0.5)
    warmup: list[dict] = []
    runs: list[dict] = []
    head = settings.head_tokens
    # Everything alive now (models, tokenizer, libraries) moves to a permanent generation, so
    # the collection before each run (leftovers of the previous mode) takes milliseconds.
    gc.collect()
    gc.freeze()
    try:
        if warm:
            base = settings.decode
            warm_settings = base.replace(max_new_tokens=min(settings.warmup_tokens, base.max_new_tokens)).for_sample(0)
            for mode in warm:
                bar.set_postfix_str(f"warm-up {mode.name}", refresh=False)
                rec = run_one(engine, prompts[0], mode, warm_settings, memory, hf, llama, head=head)
                rec["repeat"] = -1
                warmup.append(_public(rec))
                bar.update(1)
        group = 0
        turn_kinds: dict[tuple[str, int], str] = {}
        timed = next((m for m in modes if m.name == STANDARD), modes[0])  # min_seconds counts its answers
        for prompt in prompts:
            spent, r = 0.0, 0
            while r < settings.repeats or (spent < settings.min_seconds and r < settings.max_repeats):
                if r >= settings.repeats:
                    bar.total += len(modes)
                shift = group % len(modes)
                order = modes[shift:] + modes[:shift]
                repeat = settings.decode.for_sample(r)
                turns: list[dict[str, dict]] = [{} for _ in range(max(len(prompt.conversation), 1))]
                for pos, mode in enumerate(order):
                    bar.set_postfix_str(f"{prompt.id} #{r + 1} {mode.name}", refresh=False)
                    if prompt.conversation:
                        recs = run_conversation(engine, prompt, mode, repeat, memory, hf, llama, head,
                                                settings.read_ahead)
                    else:
                        recs = [run_one(engine, prompt, mode, repeat, memory, hf, llama, head=head,
                                        writing=settings.read_while_writing)]
                    for t, rec in enumerate(recs):
                        rec["repeat"] = r
                        rec["order"] = pos
                        turns[t][mode.name] = rec
                        if mode is timed:
                            spent += rec.get("generate_s") or 0.0
                    bar.update(1)
                if prompt.conversation:
                    _name_turns(prompt, turns, turn_kinds)
                for recs in turns:
                    if settings.decode.sampling.greedy:
                        _mark_identical(recs, engine.tokenizer, near_tie)
                        _mark_llamacpp_identical(recs)
                    for mode in modes:  # stored in mode order, whatever order they ran in
                        if mode.name in recs:
                            runs.append(_public(recs[mode.name]))
                group += 1
                r += 1
    finally:
        bar.close()
        gc.unfreeze()
    return {"runs": runs, "warmup": warmup}


def run_conversation(engine, prompt, mode: Mode, settings: DecodeSettings, memory, hf=None, llama=None,
                     head: int | None = None, read_ahead: bool = True) -> list[dict]:
    """Every turn of a conversation in one mode, each answer kept in the chat for the next
    turn; a raw record per turn (fewer when a turn fails or the chat outgrows the context).
    read_ahead: our modes' draft reads what it skipped between the turns (module docstring)."""
    idle = getattr(engine, "read_ahead", None) if read_ahead and not (mode.is_hf or mode.is_llamacpp) else None
    messages: list[dict] = []
    recs: list[dict] = []
    for t, user in enumerate(prompt.conversation):
        messages.append({"role": "user", "content": user})
        if t and not engine.fit(messages, settings.max_new_tokens).fits:
            break
        turn = BenchPrompt(f"{prompt.id}#{t + 1}", prompt.category, tuple(messages), prompt.split)
        rec = run_one(engine, turn, mode, settings, memory, hf, llama, reuse_cache=t > 0, head=head)
        rec["turn"] = t + 1
        recs.append(rec)
        if rec.get("error") or rec.get("text") is None:
            break
        messages.append({"role": "assistant", "content": rec["text"]})
        if idle is not None and t + 1 < len(prompt.conversation):
            idle()  # the next turn's Stats carry what it read
    return recs


def _name_turns(prompt, turns: list[dict[str, dict]], kinds: dict[tuple[str, int], str]) -> None:
    """Each turn's category (the runner's docstring), fixed at its first repeat."""
    for t, recs in enumerate(turns):
        if not recs:
            continue
        if (prompt.id, t) not in kinds:
            ref = recs.get(STANDARD) or next(iter(recs.values()))
            kinds[(prompt.id, t)] = (CONVERSATION if t == 0 else
                                     f"{CONVERSATION}-code" if "```" in (ref.get("text") or "") else
                                     f"{CONVERSATION}-prose")
        for rec in recs.values():
            rec["category"] = kinds[(prompt.id, t)]


def run_one(engine, prompt, mode: Mode, settings: DecodeSettings, memory, hf=None, llama=None,
            reuse_cache: bool = False, head: int | None = None, writing: bool = False) -> dict:
    """One measured generation with `settings` (those of this repeat; the mode sets its own
    mode, proposer and k); a raw record (with token ids and events for the identity check).
    reuse_cache: a conversation's later turn, decoded on the cache the previous turn left (our
    modes; a peer runs the whole chat again). head: otherwise, the caches keep at most that many
    of the prompt's first tokens (the template's head: the module docstring); None: none.
    writing: the message but its last paragraph is read before the send (module docstring)."""
    gc.collect()
    rec = {"prompt_id": prompt.id, "category": prompt.category, "mode": mode.name, "kind": mode.kind,
           "draft_tokens": mode.draft_tokens, "error": None}
    if (mode.is_hf or mode.is_llamacpp) and prompt.schema is not None:
        rec.update(error="not measured: this peer is not given the prompt's JSON schema", tokens_per_second=None,
                   token_ids=None, events=None)
        return rec
    if mode.is_hf or mode.is_llamacpp:
        try:
            if mode.is_hf:
                return _run_hf(engine, prompt, mode, settings, memory, hf, rec)
            return _run_llamacpp(engine, prompt, mode, settings, llama, rec)
        except Exception as exc:  # noqa: BLE001 -- the peer failing is a result, not our crash
            memory.stop()
            rec.update(error=f"{type(exc).__name__}: {exc}".splitlines()[0][:300], tokens_per_second=None,
                       token_ids=None, events=None)
            return rec
    return _run_engine(engine, prompt, mode, settings, memory, rec, reuse_cache, head,
                       writing and not reuse_cache and head is not None)


def _run_llamacpp(engine, prompt, mode, settings: DecodeSettings, llama, rec) -> dict:
    """llama.cpp in its own process on the prompt text our chat template renders; its own
    timings (prefill + decoding), so its start-up and model mapping are left out."""
    if llama is None:
        raise RuntimeError("the llama.cpp baseline was not set up")
    text = engine.tokenizer.apply_chat_template(list(prompt.messages), add_generation_prompt=True, tokenize=False)
    s = settings.sampling
    sampling = (s.temperature, s.top_k, s.top_p, settings.seed)
    t0 = time.perf_counter()
    if mode.kind == LLAMACPP:
        res = llama.plain(text, settings.max_new_tokens, *sampling)
    else:
        res = llama.speculative(text, settings.max_new_tokens, mode.draft_tokens, mode.p_min, *sampling,
                                spec_type=mode.spec_type)
    wall = time.perf_counter() - t0
    rec.update(
        prompt_tokens=res.prompt_tokens,
        new_tokens=res.new_tokens,
        latency_s=wall,  # the whole process: start-up and model mapping included
        ttft_s=res.prefill_s,
        tokenize_s=None,
        generate_s=res.seconds,
        detokenize_s=None,
        tokens_per_second=res.tokens_per_second,
        acceptance_rate=(res.accepted / res.drafted) if res.drafted else None,
        tokens_per_speculative_step=None,
        target_forward_passes=None,
        draft_forward_passes=None,
        per_position_proposed=[],
        per_position_accepted=[],
        mean_draft_length=None,
        peak_memory_bytes=res.peak_rss_bytes,
        stop_reason=None,
        text=res.text,
        token_ids=None,
        events=None,
    )
    return rec


def _mark_llamacpp_identical(recs: dict[str, dict]) -> None:
    """Temperature 0: is each of llama.cpp's speculative texts its plain text (up to the
    shorter)? Its tokens are not ours (other kernels), so it is compared with itself."""
    from .llamacpp import first_difference

    plain = next((r for r in recs.values() if r["kind"] == LLAMACPP and not r.get("error")), None)
    for rec in recs.values():
        if rec["kind"] != LLAMACPP_SPEC or rec.get("error") or plain is None:
            continue
        # the tools end their output with line breaks of their own: not part of the comparison
        at = first_difference(plain["text"].rstrip(), rec["text"].rstrip())
        rec["same_text_as_plain"] = at is None
        rec["text_parts_at"] = at


def _run_engine(engine, prompt, mode, settings: DecodeSettings, memory, rec, reuse_cache: bool = False,
                head: int | None = None, writing: bool = False) -> dict:
    written = _written_part(prompt) if writing else None
    if written is not None:  # as a new chat: the head alone in every cache, then the part read ahead
        engine.read_template_head()
        engine.read_prompt(engine.encode_chat(written))
    memory.start()
    t0 = time.perf_counter()
    ids = engine.encode_chat(list(prompt.messages))
    t_tok = time.perf_counter()
    decode = mode.settings(settings)
    if prompt.schema is not None:  # the answer's grammar, as a response_format json_schema request has it
        decode = decode.replace(grammar=GrammarSpec("json_schema", prompt.schema))
    # a later turn keeps the whole chat so far; a first turn at most the template's head
    gen = engine.generate(ids, decode, reuse_cache=reuse_cache or bool(head),
                          reuse_at_most=None if reuse_cache or written is not None else head)
    first = None
    for _ev in gen:
        if first is None:
            first = time.perf_counter()
    t_gen = time.perf_counter()
    text = gen.text
    t_end = time.perf_counter()
    peak = memory.stop()
    s = gen.stats
    proposes = mode.proposes
    rec.update(
        prompt_tokens=len(ids),
        new_tokens=s.new_tokens,
        latency_s=t_end - t0,
        ttft_s=(first - t0) if first is not None else None,
        tokenize_s=t_tok - t0,
        generate_s=s.seconds,
        detokenize_s=t_end - t_gen,
        tokens_per_second=s.tokens_per_second,
        decode_tokens_per_second=s.decode_tokens_per_second,
        # a run whose steps proposed nothing (no lookup match) has no alpha or tau, not zeros
        acceptance_rate=s.acceptance_rate if proposes and s.proposed_tokens else None,
        tokens_per_speculative_step=s.tokens_per_speculative_step if proposes and s.speculative_steps else None,
        plain_step_share=s.plain_step_share if proposes else None,
        kinds={k: gen.kinds.count(k) for k in ("accepted", "corrected", "bonus", "standard")},
        target_forward_passes=s.target_forward_passes,
        draft_forward_passes=s.draft_forward_passes,
        per_position_proposed=list(s.per_position_proposed) if proposes else [],
        per_position_accepted=list(s.per_position_accepted) if proposes else [],
        mean_draft_length=(sum(s.draft_lengths) / len(s.draft_lengths)) if proposes and s.draft_lengths else None,
        peak_memory_bytes=peak,
        stop_reason=s.stop_reason,
        reused_prompt_tokens=s.reused_prompt_tokens,
        # a plain step's time inside this mode (standard: every step after the first), the
        # draft's reads of text it had not seen, and what each source's steps took
        mean_plain_step_seconds=s.mean_plain_step_seconds or None,
        catchup_seconds=s.catchup_seconds,
        catchup_tokens=s.catchup_tokens,
        idle_read_seconds=s.idle_read_seconds,
        idle_read_tokens=s.idle_read_tokens,
        prompt_read_ahead_seconds=s.prompt_read_ahead_seconds,
        prompt_read_ahead_tokens=s.prompt_read_ahead_tokens,
        steps_by_source=dict(s.steps_by_source),
        proposed_by_source=dict(s.proposed_by_source),
        accepted_by_source=dict(s.accepted_by_source),
        seconds_by_source=dict(s.seconds_by_source),
        text=text,
        token_ids=gen.token_ids,
        events=list(gen.events),
    )
    return rec


def _written_part(prompt) -> list[dict] | None:
    """The chat of a single-turn prompt with its message cut before its last paragraph (plus
    the paragraph's first word, as a question begun): what the input box held while the question
    was written. None where the message is one paragraph."""
    if prompt.conversation or not prompt.messages:
        return None
    last = prompt.messages[-1]["content"]
    cut = last.rstrip().rfind("\n\n")
    if cut <= 0:
        return None
    question = last[cut + 2:].split()
    begun = last[: cut + 2] + (question[0] if question else "")
    return list(prompt.messages[:-1]) + [{**prompt.messages[-1], "content": begun}]


def _run_hf(engine, prompt, mode, settings: DecodeSettings, memory, hf, rec) -> dict:
    if hf is None:
        raise RuntimeError("the transformers baseline was not set up")
    memory.start()
    t0 = time.perf_counter()
    ids = engine.encode_chat(list(prompt.messages))
    t_tok = time.perf_counter()
    s = settings.sampling
    res = hf.generate(ids, settings.max_new_tokens, s.temperature, s.top_k, s.top_p, settings.seed,
                      assisted=mode.kind == HF_ASSISTED)
    t_gen = time.perf_counter()
    new = res.token_ids
    # generate() returns everything up to and including the first EOS (batch of one: no padding)
    text = engine.tokenizer.decode(new, skip_special_tokens=True)
    t_end = time.perf_counter()
    peak = memory.stop()
    n = len(new)
    rec.update(
        prompt_tokens=len(ids),
        new_tokens=n,
        latency_s=t_end - t0,
        ttft_s=(res.first_token_at - t0) if res.first_token_at is not None else None,
        tokenize_s=t_tok - t0,
        generate_s=res.seconds,
        detokenize_s=t_end - t_gen,
        tokens_per_second=n / res.seconds if res.seconds > 0 else 0.0,
        decode_tokens_per_second=res.decode_tokens_per_second,
        acceptance_rate=None,  # transformers does not report it
        # assisted: every forward call after the prefill verifies a proposal, so tokens after the
        # first per call after the first is its tokens per speculative step; plain generate has none
        tokens_per_speculative_step=((n - 1) / (res.target_forward_passes - 1)
                                if mode.kind == HF_ASSISTED and res.target_forward_passes > 1 else None),
        plain_step_share=None,
        kinds=None,
        target_forward_passes=res.target_forward_passes,
        draft_forward_passes=res.draft_forward_passes,
        per_position_proposed=[],
        per_position_accepted=[],
        mean_draft_length=None,
        peak_memory_bytes=peak,
        stop_reason="eos" if new and new[-1] in set(engine.target.eos_token_ids) else "max_new_tokens",
        text=text,
        token_ids=new,
        events=None,
    )
    return rec


def _mark_identical(recs: dict[str, dict], tokenizer, near_tie: float) -> None:
    """Temperature 0: does each mode's token sequence equal standard's? Where not, the first
    divergence with the target's top-2 logit margin there."""
    from ..events import first_divergence

    std = recs.get(STANDARD)
    if std is None or std.get("token_ids") is None:
        return
    std["identical_to_standard"] = True
    std["divergence"] = None
    std_margins = [e.margin for e in std["events"]]
    for name, rec in recs.items():
        if name == STANDARD:
            continue
        if rec.get("token_ids") is None:  # the baseline failed, or is llama.cpp (its own tokens): not compared
            rec["identical_to_standard"] = None
            rec["divergence"] = None
            continue
        if rec["events"] is not None:
            d = first_divergence(std["events"], rec["events"])
            div = None if d is None else (d.position, d.token_a, d.token_b, d.margin_a, d.margin_b)
        else:  # hf baseline: token ids only; the margin is the target's, read at standard's step
            a, b = std["token_ids"], rec["token_ids"]
            div = None
            for i in range(max(len(a), len(b))):
                ta = a[i] if i < len(a) else -1
                tb = b[i] if i < len(b) else -1
                if ta != tb:
                    div = (i, ta, tb, std_margins[i] if i < len(std_margins) else None, None)
                    break
        rec["identical_to_standard"] = div is None
        rec["divergence"] = None if div is None else _divergence_dict(*div, tokenizer, near_tie)


def _divergence_dict(pos, tok_std, tok_mode, m_std, m_mode, tokenizer, near_tie) -> dict:
    def piece(t):
        if t < 0:
            return None  # the sequence had already ended
        try:
            return tokenizer.decode([t])
        except Exception:  # noqa: BLE001
            return None

    margins = [m for m in (m_std, m_mode) if m is not None]
    margin = min(margins) if margins else None
    return {
        "position": pos,
        "token_standard": tok_std,
        "token_mode": tok_mode,
        "text_standard": piece(tok_std),
        "text_mode": piece(tok_mode),
        "margin_standard": m_std,
        "margin_mode": m_mode,
        "margin": margin,
        "near_tie": margin is not None and margin <= near_tie,
    }


def _public(rec: dict) -> dict:
    """Drop what is only needed during the run (events, token ids)."""
    out = {k: v for k, v in rec.items() if k not in ("events", "token_ids")}
    out.setdefault("identical_to_standard", None)
    out.setdefault("divergence", None)
    out.setdefault("same_text_as_plain", None)
    out.setdefault("text_parts_at", None)
    return out
