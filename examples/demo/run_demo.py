"""Portal's demo on the embedded local defaults (no cloud account needed).

What is there so far: the plugin host and the local notice source. The demo lists the plugins
Portal finds, delivers a preemption notice to this machine through the local source, and shows
the node-side watcher receiving it — the first step of "What happens on a notice". It grows into
the full loop (pause, checkpoint, resume) as those pieces land.
"""

from __future__ import annotations

import tempfile

from portal.core.builtin.local_notices import NOTICE_DIR_ENV, deliver_notice
from portal.core.plugins import Plugins
from portal.core.specs import NoticeSourceContext


def main() -> int:
    plugins = Plugins.load()
    for failure in plugins.load_failures:
        print(f"warning: {failure.describe()}")
    print("notice sources:", ", ".join(sorted(plugins.notice_sources())))
    print("storage backends:", ", ".join(sorted(plugins.storage_backends())) or "none yet")
    with tempfile.TemporaryDirectory(prefix="portal-demo-") as notices:
        spec = plugins.notice_source("local")
        source = spec.factory(NoticeSourceContext(environ={NOTICE_DIR_ENV: notices}))
        assert source.detect()
        print("watching", notices, "- delivering a 120 s notice")
        sent = deliver_notice(notices, seconds=120)
        (seen,) = source.poll(1.0)
        print(f"node saw notice {seen.id} ({seen.kind}), deadline in {seen.notice_s:.0f} s")
        assert seen.id == sent.id
        source.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
