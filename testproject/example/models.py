"""A ledger the example flows write to, so tests can count effects in the database."""

from __future__ import annotations

from django.db import models


class LedgerEntry(models.Model):
    """One effect of one handler call: ``key`` names the task, ``attempt`` the call that wrote it."""

    flow = models.CharField(max_length=64)
    key = models.CharField(max_length=200)
    attempt = models.IntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["flow", "key"])]

    def __str__(self) -> str:
        return f"{self.flow}:{self.key}#{self.attempt}"


class SupportThread(models.Model):
    """A customer's support thread: the domain row the support pipeline moves through its states.

    ``acknowledged_at`` is set by the latency-sensitive step (the customer sees a reply), ``labels`` and
    ``team`` by classification and routing; ``routed_at`` marks the end of the pipeline.
    """

    subject = models.CharField(max_length=200)
    messages = models.JSONField(default=list)
    acknowledged_at = models.DateTimeField(null=True)
    labels = models.JSONField(default=list)
    team = models.CharField(max_length=50, blank=True)
    routed_at = models.DateTimeField(null=True)
    classify_done = models.BooleanField(default=False)
    """Used only by the hand-written variant (support_manual.py), which tracks progress itself."""

    def __str__(self) -> str:
        return f"thread {self.pk}: {self.subject}"
