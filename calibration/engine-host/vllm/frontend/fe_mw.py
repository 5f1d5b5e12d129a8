"""Pure-ASGI middleware loaded through vLLM's own `--middleware` option (build_app adds it with
app.add_middleware, so it sits just inside Starlette's ServerErrorMiddleware, i.e. next to
uvicorn). It counts SSE chunks handed to uvicorn: every `http.response.body` message with
more_body=True and a non-empty body, counted after uvicorn's send() returned (uvicorn's httptools
protocol has then framed the chunk and called transport.write, which writes to the socket).
When the count reaches STATE.target it sets STATE.event, which ends the harness's step.
With STATE.time_send on it also sums the time spent inside uvicorn's send() for those chunks."""
import time

_pc = time.perf_counter


class _State:
    def __init__(self):
        self.count = 0
        self.target = 1 << 62
        self.event = None        # asyncio.Event, set by the harness
        self.time_send = False
        self.send_s = 0.0        # summed wall time inside uvicorn send() (components mode)


STATE = _State()


class StepCounterMiddleware:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        st = STATE

        async def counting_send(message):
            if message["type"] == "http.response.body" and message.get("more_body", False) \
                    and message.get("body"):
                if st.time_send:
                    t0 = _pc()
                    await send(message)
                    st.send_s += _pc() - t0
                else:
                    await send(message)
                st.count += 1
                if st.count >= st.target:
                    st.event.set()
            else:
                await send(message)

        return await self.app(scope, receive, counting_send)


class PassThroughMiddleware:
    """Diagnostic only: one more pure-ASGI layer with a send wrapper like the counter's
    (no counting), to estimate what the counting layer itself adds per chunk."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def wrapped_send(message):
            await send(message)

        return await self.app(scope, receive, wrapped_send)
