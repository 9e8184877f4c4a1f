"""Compaction settings: one object, validated when built."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidInputError

# Defaults from the session spec (§7.5.1), which takes them from pi-mono.
DEFAULT_RESERVE_TOKENS = 16_384
DEFAULT_KEEP_RECENT_TOKENS = 20_000
# The window of current Claude models; most agents run with 128k-1M.
DEFAULT_CONTEXT_WINDOW = 200_000
# A tool result longer than this is cut when serialised for the summarizer: 2,000
# characters (~500 tokens) keeps the gist of a file read or a command's output.
DEFAULT_TOOL_RESULT_MAX_CHARS = 2_000
DEFAULT_MAX_FAILURES = 3
# open-harness protects the newest ~40k tokens from pruning.
DEFAULT_PRUNE_PROTECT_TOKENS = 40_000


@dataclass(frozen=True)
class CompactionSettings:
    """How and when a session is compacted.

    Attributes:
        enabled: whether :func:`maybe_compact` compacts at all (manual
            :func:`compact` always runs).
        reserve_tokens: tokens kept free for the model's answer; compaction triggers when
            the context holds more than ``context_window - reserve_tokens``.
        keep_recent_tokens: how many of the newest tokens stay as they are.
        context_window: the model's context window, in tokens.
        tool_result_max_chars: a longer tool result is cut when shown to the summarizer.
        max_failures: consecutive failed auto-compactions after which
            :func:`maybe_compact` stops trying for that session.
        prune_protect_tokens: the newest tokens whose tool results pruning never touches.

    Raises:
        InvalidInputError: a value is out of range (e.g. a reserve not below the window).
    """

    enabled: bool = True
    reserve_tokens: int = DEFAULT_RESERVE_TOKENS
    keep_recent_tokens: int = DEFAULT_KEEP_RECENT_TOKENS
    context_window: int = DEFAULT_CONTEXT_WINDOW
    tool_result_max_chars: int = DEFAULT_TOOL_RESULT_MAX_CHARS
    max_failures: int = DEFAULT_MAX_FAILURES
    prune_protect_tokens: int = DEFAULT_PRUNE_PROTECT_TOKENS

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise InvalidInputError(f"enabled must be a bool, got {self.enabled!r}")
        for name, low in (
            ("reserve_tokens", 0),
            ("keep_recent_tokens", 0),
            ("context_window", 1),
            ("tool_result_max_chars", 1),
            ("max_failures", 1),
            ("prune_protect_tokens", 0),
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise InvalidInputError(f"{name} must be an int >= {low}, got {value!r}")
        if self.reserve_tokens >= self.context_window:
            raise InvalidInputError(
                f"reserve_tokens ({self.reserve_tokens}) must be below context_window "
                f"({self.context_window})"
            )

    @property
    def threshold(self) -> int:
        """Context tokens above which compaction triggers."""
        return self.context_window - self.reserve_tokens

    @property
    def summary_max_tokens(self) -> int:
        """The budget given to the summarizer for the history summary: 80% of the reserve
        (pi's figure), at least 1,024."""
        return max(1_024, self.reserve_tokens * 4 // 5)

    @property
    def turn_prefix_max_tokens(self) -> int:
        """The budget for the summary of a split turn's prefix: half the reserve."""
        return max(512, self.reserve_tokens // 2)


def should_compact(context_tokens: int, settings: CompactionSettings) -> bool:
    """The trigger: ``context_tokens > context_window - reserve_tokens`` (and enabled)."""
    return settings.enabled and context_tokens > settings.threshold
