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
