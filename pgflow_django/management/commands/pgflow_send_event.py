"""``manage.py pgflow_send_event EVENT --run RUN_ID | --key KEY``: send an event to the runs waiting
for it, through the same call as ``pgflow_django.send_event`` (docs/durable.md)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from pgflow_django.management.cli import USAGE_ERROR, PgflowCommand, load_json_argument, printable, run_id
from pgflow_django.runs.events import send_event


class Command(PgflowCommand):
    help = (
        "Send an event to one run (--run) or to every run whose wait key has a value (--key): each\n"
        "event step waiting for it takes it, and a worker's wait pass completes the step with the\n"
        "payload as its output; the event is kept for PGFLOW['EVENT_RETENTION_SECONDS'] for the\n"
        "waits that start later."
    )
    examples = """
  manage.py pgflow_send_event order.approved --key 1042 --payload '{"by": 1}'
  manage.py pgflow_send_event parcel.delivered \\
      --run 0b4e6c1e-8f5a-4d2b-9a57-3c1f2e8d9a10
  manage.py pgflow_send_event order.approved --key 1042 --event-id a-1042

exit codes: 0 sent (the count of waiting steps it reached is printed, 0 when none waits yet); 1 an
error; 2 bad arguments
"""

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("event", metavar="EVENT", help="the event's name, as the step waits for it")
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--run", type=run_id, metavar="RUN_ID", help="send it to this run")
        target.add_argument(
            "--key",
            metavar="KEY",
            help="send it to the runs whose wait key has this value (compared as text)",
        )
        parser.add_argument(
            "--payload",
            metavar="JSON",
            default="null",
            help="the payload, the waiting step's output: JSON, - for standard input, @path for a file",
        )
        parser.add_argument(
            "--event-id", metavar="ID", help="a second send with the same event and id is a no-op while kept"
        )

    def run(self, *args: Any, **options: Any) -> None:
        payload = load_json_argument(options["payload"], "--payload")
        try:
            completed = send_event(
                options["event"],
                payload,
                run_id=options["run"],
                key=options["key"],
                event_id=options["event_id"],
                using=self.using,
            )
        except ValueError as exc:
            raise CommandError(printable(exc), returncode=USAGE_ERROR) from None
        target = f"run {options['run']}" if options["run"] else f"key {printable(options['key'])}"
        self.stdout.write(
            f"event {printable(options['event'])} sent to {target}: delivered to {completed} waiting step(s)"
        )
