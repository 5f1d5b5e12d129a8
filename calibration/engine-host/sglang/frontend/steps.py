"""Builds the per-decode-step messages the SGLang 0.5.9 scheduler sends to the detokenizer
(BatchTokenIDOutput, fields filled as in scheduler_output_processor_mixin.py
stream_output_generation L888-L1185), one new real text token per request per step, no logprobs,
stream=True, stream_interval=1, no finish until the last step."""
import glob, os, pickle, time
import sglang
from sglang.srt.managers.io_struct import BatchTokenIDOutput, GetLoadReqOutput

MODEL = os.environ.get("FE_MODEL", "/tmp/fe-sglang/model")
INIT_OFF = 5  # INIT_INCREMENTAL_DETOKENIZATION_OFFSET (schedule_batch.py)


def text_stream(tok, n_min=60000):
    """Real text (package METADATA files) tokenized with the model tokenizer: realistic token mix."""
    sp = os.path.dirname(os.path.dirname(sglang.__file__))
    ids = []
    for f in sorted(glob.glob(os.path.join(sp, "*.dist-info", "METADATA"))):
        ids += tok.encode(open(f, errors="ignore").read(), add_special_tokens=False)
        if len(ids) >= n_min:
            break
    return ids


def build_token_steps(rids, prompt_lens, n_steps, stream, seed=0, finish_last=True, hist=0):
    """Returns a list of BatchTokenIDOutput, step 0 = the prefill output (first token, with the
    5 surrounding prompt tokens as decode_ids, read_offset=5), then one decode token per step.
    hist>0: step 0 instead carries `hist` earlier output tokens plus the new one (as if the request had
    already streamed `hist` tokens), so the per-request text/output_ids state is long from step 1 on."""
    import random
    rng = random.Random(seed)
    B = len(rids)
    offs = [rng.randrange(len(stream)) for _ in range(B)]
    L = len(stream)
    now = time.time()
    out = []
    for k in range(n_steps):
        last = finish_last and k == n_steps - 1
        decode_ids, read_offsets, output_ids = [], [], []
        for i in range(B):
            t = stream[(offs[i] + INIT_OFF + hist + k) % L]
            if k == 0:
                h = [stream[(offs[i] + INIT_OFF + j) % L] for j in range(hist)]
                decode_ids.append([stream[(offs[i] + j) % L] for j in range(INIT_OFF)] + h + [t])
                read_offsets.append(INIT_OFF)
                output_ids.append(h + [t])
                continue
            decode_ids.append([t])
            read_offsets.append(INIT_OFF)
            output_ids.append([t])
        fin = [{"type": "length", "length": k + 1} if last else None for _ in range(B)]
        out.append(BatchTokenIDOutput(
            rids=list(rids), http_worker_ipcs=[None] * B,
            spec_verify_ct=[], spec_accepted_tokens=[], spec_acceptance_histogram=[],
            queue_time=[0.001] * B, forward_entry_time=[now] * B,
            prefill_launch_delay=[0.0005] * B, prefill_launch_latency=[0.01] * B,
            prefill_finished_ts=[now] * B,
            finished_reasons=fin, decoded_texts=[""] * B, decode_ids=decode_ids,
            read_offsets=read_offsets, output_ids=output_ids,
            skip_special_tokens=[True] * B, spaces_between_special_tokens=[True] * B,
            no_stop_trim=[False] * B, prompt_tokens=list(prompt_lens),
            completion_tokens=[k + 1 + hist] * B, cached_tokens=[0] * B, cached_tokens_details=[None] * B,
            input_token_logprobs_val=None, input_token_logprobs_idx=None,
            output_token_logprobs_val=None, output_token_logprobs_idx=None,
            input_top_logprobs_val=None, input_top_logprobs_idx=None,
            output_top_logprobs_val=None, output_top_logprobs_idx=None,
            input_token_ids_logprobs_val=None, input_token_ids_logprobs_idx=None,
            output_token_ids_logprobs_val=None, output_token_ids_logprobs_idx=None,
            output_token_entropy_val=None, output_hidden_states=None, routed_experts=None,
            customized_info={}, placeholder_tokens_idx=None, placeholder_tokens_val=None,
            retraction_counts=[0] * B,
            load=GetLoadReqOutput(dp_rank=0, num_reqs=B, num_waiting_reqs=0,
                                  num_tokens=B * 1000, ts_tic=time.perf_counter()),
        ))
    return out


def make_detokenizer(server_args):
    """A real DetokenizerManager without its ZMQ sockets (init_tokenizer + init_running_status +
    init_request_dispatcher, i.e. __init__ minus init_ipc_channels)."""
    from sglang.srt.managers.detokenizer_manager import DetokenizerManager
    d = DetokenizerManager.__new__(DetokenizerManager)
    d.init_tokenizer(server_args)
    d.init_running_status(server_args)
    d.init_request_dispatcher()
    return d
