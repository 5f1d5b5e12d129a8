"""Classify py-spy collapsed stacks (diag.sh 'pyspy' stage: B=2048, 20 warm-up + 400 timed
steps, Python frames only, 100 Hz, --nonblocking) into per-step pieces.
Startup / admission samples (imports, tokenizer load, request admission) are set aside; the
rest are the steady decode steps (plus the 20 warm-up steps). GC is not visible here (no native
frames): it is attributed to whatever Python frame triggered the collection.
usage: python pyspy_breakdown.py /tmp/fe-vllm/pyspy_2048.txt > runs_diag/pyspy_breakdown.md
"""
import collections
import json
import sys

RULES = [  # (category, predicate on the ';'-joined function names), first match wins
    ("startup_or_admission", lambda f: any(x in f for x in (
        "_find_and_load", "from_pretrained", "build_async_engine_client",
        "OpenAIServingChat.create_chat_completion", "create_chat_completion",
        "text_token_stream", "FakeEngine.encode_steps", "FakeEngine.input_loop",
        "AsyncLLM.add_request", "setup_server", "build_and_serve", "make_arg_parser",
        "Thread._bootstrap", ))),
    # the send chain below StreamingResponse: middleware send wrappers + uvicorn send
    ("send: uvicorn RequestResponseCycle.send (framing + transport.write)",
     lambda f: "RequestResponseCycle.send" in f),
    ("send: middleware send wrappers (Prometheus instrumentator, CORS, ServerError, "
     "exception handler, counting layer)",
     lambda f: any(x in f for x in (
         "ServerErrorMiddleware.__call__.<locals>._send",
         "PrometheusInstrumentatorMiddleware.__call__.<locals>.send_wrapper",
         "CORSMiddleware.send", "wrap_app_handling_exceptions.<locals>.wrapped_app.<locals>.sender",
         "StepCounterMiddleware.__call__.<locals>.counting_send"))),
    ("generate(): AsyncLLM.generate / RequestOutputCollector.get (wake, queue)",
     lambda f: "AsyncLLM.generate" in f or "RequestOutputCollector.get" in f),
    ("chat chunk: pydantic model_dump_json", lambda f: "BaseModel.model_dump_json" in f),
    ("chat chunk: pydantic model construction (incl. OpenAIBaseModel wrap validator)",
     lambda f: "BaseModel.__init__" in f or "OpenAIBaseModel.__log_extra_fields__" in f),
    ("chat chunk: rest of chat_completion_stream_generator body",
     lambda f: "OpenAIServingChat.chat_completion_stream_generator" in f),
    ("starlette StreamingResponse loop (stream_response / wrap, not in the above)",
     lambda f: "StreamingResponse.stream_response" in f or "StreamingResponse.__call__" in f),
    ("output_handler: OutputProcessor.process_outputs: detokenizer",
     lambda f: "OutputProcessor.process_outputs" in f and "Detokenizer" in f),
    ("output_handler: OutputProcessor.process_outputs: stats update",
     lambda f: "OutputProcessor.process_outputs" in f and "_update_stats_from_output" in f),
    ("output_handler: OutputProcessor.process_outputs: make_request_output",
     lambda f: "OutputProcessor.process_outputs" in f and "make_request_output" in f),
    ("output_handler: OutputProcessor.process_outputs: collector put",
     lambda f: "OutputProcessor.process_outputs" in f and "RequestOutputCollector.put" in f),
    ("output_handler: OutputProcessor.process_outputs: rest",
     lambda f: "OutputProcessor.process_outputs" in f),
    ("output_handler: stat loggers record (Prometheus + logging)",
     lambda f: "AsyncLLM._run_output_handler.<locals>.output_handler" in f and ".record" in f),
    ("output_handler: rest", lambda f: "AsyncLLM._run_output_handler.<locals>.output_handler" in f),
    ("engine output socket: MsgpackDecoder.decode",
     lambda f: "MsgpackDecoder.decode" in f),
    ("engine output socket: zmq recv + rest",
     lambda f: "AsyncMPClient._ensure_output_queue_task.<locals>.process_outputs_socket" in f),
    ("harness driver (push frames, Event.wait)", lambda f: "run_B" in f or "Event.wait" in f),
]


def main():
    path = sys.argv[1]
    cnt = collections.Counter()
    total = 0
    for line in open(path):
        st, n = line.rstrip("\n").rsplit(" ", 1)
        n = int(n)
        total += n
        funcs = [x.split(" (")[0] for x in st.split(";")]
        joined = ";".join(funcs)   # predicates test substrings of the joined stack
        for cat, pred in RULES:
            if pred(joined):
                cnt[cat] += n
                break
        else:
            cnt["other: " + funcs[-1]] += n
    steady = total - cnt["startup_or_admission"]
    print(f"py-spy samples: {total}; startup/admission {cnt['startup_or_admission']}; "
          f"steady {steady}\n")
    print("| piece | share of steady samples |\n|---|---:|")
    out = {}
    others = 0
    for cat, n in cnt.most_common():
        if cat == "startup_or_admission":
            continue
        if cat.startswith("other: ") and n / steady < 0.005:
            others += n
            continue
        out[cat] = n / steady
        print(f"| {cat} | {n/steady*100:.1f} % |")
    print(f"| other (each < 0.5 %) | {others/steady*100:.1f} % |")
    out["other (each < 0.5 %)"] = others / steady
    with open(path + ".breakdown.json", "w") as f:
        json.dump({"total_samples": total, "steady_samples": steady, "shares": out}, f,
                  indent=1)


if __name__ == "__main__":
    main()
