"""Helpers the whole test suite shares; ``tests.support.db`` is the one way tests send SQL."""
