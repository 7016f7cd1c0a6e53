"""What every pgflow admin page refuses: pgflow's rows change through the engine and the operations,
never by add, change or delete forms."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest


class NoEditsMixin:
    """No add, change or delete permission, whoever asks (viewing keeps Django's own check)."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
