#!/usr/bin/env python3
"""Reference batch pass of the receiptflow bench.

receipt_hourly_counts is the implementation given in the project's seed
text (hourly counts of distinct submitted events, first occurrence of an
event_id wins). It reads occurred_minute, which only schema v1 records
carry, so read_events gives a v2 record (occurred_at) the occurred_minute of
its event time before the function sees it; nothing else is validated.

Usage: receipt_hourly_counts.py EVENTS.ndjson
Prints one JSON object: records read, seconds spent in the pass (reading and
parsing the file included, interpreter start-up excluded) and the counts by
hour start (minutes since the epoch).
"""

import json
import sys
import time
from datetime import datetime, timezone


def receipt_hourly_counts(events):
    counts = {}
    seen_ids = set()
    for event in events:
        event_id = event["event_id"]
        if event_id in seen_ids:
            continue
        seen_ids.add(event_id)
        if event["type"] != "submitted":
            continue
        hour_start = (event["occurred_minute"] // 60) * 60
        counts[hour_start] = counts.get(hour_start, 0) + 1
    return counts


def read_events(path, tally):
    """Yield every NDJSON record of path as a dict, counting them in tally."""
    with open(path, "rb") as f:
        for line in f:
            if not line.strip():
                continue
            tally[0] += 1
            event = json.loads(line)
            if "occurred_minute" not in event:
                at = event["occurred_at"]
                if at.endswith("Z"):
                    at = at[:-1] + "+00:00"
                t = datetime.fromisoformat(at).astimezone(timezone.utc)
                event["occurred_minute"] = int(t.timestamp()) // 60
            yield event


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    tally = [0]
    start = time.perf_counter()
    counts = receipt_hourly_counts(read_events(argv[1], tally))
    seconds = time.perf_counter() - start
    json.dump({"records": tally[0], "seconds": seconds,
               "counts": {str(k): v for k, v in sorted(counts.items())}}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
