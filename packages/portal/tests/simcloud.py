"""The simulated cloud the placement tests run on (in process and end to end).

Save rates so slow that a checkpoint of a few kB is over the bound of GCP's 30 s notice and under
AWS's 120 s one, so every rule of "State size and spot" shows on a tiny job.
"""

from __future__ import annotations

from typing import Any

#: AWS: 1 kB/s, t0 10 s, 120 s notice: bound 55.0 kB. GCP: 100 B/s, t0 8 s, 30 s: bound 1.1 kB.
CLOUD: dict[str, Any] = {
    "format": 1,
    "providers": {
        "aws": {
            "spot_notice_s": 120,
            "regions": {"us-east-1": {"price_factor": 1.0, "spot_fraction": 0.35}},
            "machine_types": [
                {"name": "c7i.large", "vcpus": 2, "memory_gib": 4, "price": 0.0893},
                {"name": "m7i.large", "vcpus": 2, "memory_gib": 8, "price": 0.1008},
            ],
        },
        "gcp": {
            "spot_notice_s": 30,
            "regions": {"us-central1": {"price_factor": 1.0, "spot_fraction": 0.3}},
            "machine_types": [
                {"name": "e2-standard-2", "vcpus": 2, "memory_gib": 8, "price": 0.067}
            ],
        },
    },
    "storage": {
        "aws": {"same_region": {"small": [0.001, 10]}},
        "gcp": {"same_region": {"small": [0.0001, 8]}},
    },
}
