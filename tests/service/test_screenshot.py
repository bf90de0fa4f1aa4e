"""A headless-Chromium screenshot of a report page (skipped where Chromium is not installed,
except in CI: .ci/run installs it, so there a missing Chromium fails)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_report_screenshot(client, tmp_path: Path):
    if not os.access(CHROMIUM, os.X_OK):
        if os.environ.get("CI") == "true":
            pytest.fail(f"{CHROMIUM} missing in CI: .ci/run installs the Debian package")
        pytest.skip(f"no {CHROMIUM} here")
    created = client.post("/v1/plans", json={"model": "seed-70b", "cluster": "seed-512", "training": "seed-300b"})
    assert created.status_code == 201, created.text
    page = tmp_path / "report.html"
    page.write_text(client.get(created.json()["links"]["report"]).text)
    shot = tmp_path / "report.png"
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                    "--disable-background-networking", "--disable-extensions", "--no-first-run",
                    "--disable-dev-shm-usage", "--hide-scrollbars", "--window-size=1200,2000",
                    f"--screenshot={shot}", page.as_uri()],
                   check=True, timeout=60, capture_output=True)
    data = shot.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 10_000  # a blank page compresses far smaller
