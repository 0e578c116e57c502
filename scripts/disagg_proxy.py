"""A proxy for disaggregated serving: prefill servers compute prompts, decode servers decode
(engine/disagg_proxy.py).

python -m scripts.serve --model=M --port=8100 --kv_transfer_config='{"kv_role": "kv_producer",
    "kv_connector_extra_config": {"shared_storage_path": "/tmp/kv"}}'
python -m scripts.serve --model=M --port=8200 --kv_transfer_config='{"kv_role": "kv_consumer",
    "kv_connector_extra_config": {"shared_storage_path": "/tmp/kv"}}'
python -m scripts.disagg_proxy --prefill=http://127.0.0.1:8100 --decode=http://127.0.0.1:8200

Clients then call http://127.0.0.1:8000/v1 as they would one server.
"""

from __future__ import annotations

import signal
import sys

from absl import app, flags

from engine.disagg_proxy import DisaggProxy
from scripts.flag_checks import check_count

_PREFILL = flags.DEFINE_list("prefill", [], "Prefill servers' base URLs (http://host:port,...).")
_DECODE = flags.DEFINE_list("decode", [], "Decode servers' base URLs (http://host:port,...).")
_HOST = flags.DEFINE_string("host", "127.0.0.1", "Address to listen on.")
_PORT = flags.DEFINE_integer("port", 8000, "Port to listen on (0: any free one).")


def main(argv):
    del argv
    try:
        check_count("--port", _PORT.value, low=0, high=65535)
        proxy = DisaggProxy((_HOST.value, _PORT.value), _PREFILL.value, _DECODE.value)
    except (ValueError, OSError) as e:
        sys.exit(f"disagg_proxy: {e}")
    signal.signal(signal.SIGTERM, _interrupt)
    host, port = proxy.server_address[:2]
    print(f"proxy on http://{host}:{port}/v1", flush=True)
    try:
        proxy.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        proxy.server_close()


def _interrupt(signum, frame):
    raise KeyboardInterrupt


if __name__ == "__main__":
    app.run(main)
