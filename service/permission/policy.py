"""Who decides a permission request: the caller (`ask`), nobody (`auto_approve`), or the
operator's rules by tool name (`rules`), so unattended deployments need no interaction.

The `permission_*` settings section lives here too (ValueError naming the key; the
configuration reports it as a ConfigError)."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from service.permission.envelope import ALLOW_ONCE, DENY
from service.setting import check_section, one_of, setting

MODES = ("ask", "auto_approve", "rules")
RULE_ACTIONS = {"allow": ALLOW_ONCE, "deny": DENY, "ask": ""}


@dataclass
class PermissionSettings:
    """How permission requests are decided ([Human in the loop](human-in-the-loop.md))."""

    permission_mode: str = setting(
        "ask",
        "who decides `ctx.request_permission`: `ask` (the caller answers an `INPUT_REQUIRED` envelope), `auto_approve` (always allow), `rules` (by `permission_rules`); every decision is audited in the task",
        check=one_of(MODES),
    )
    permission_rules: list[str] = setting(
        [],
        'with `permission_mode = "rules"`: `ACTION:PATTERN` entries (`allow`, `deny`, `ask`; a shell-style glob on the tool name, case-sensitive), first match wins, no match = deny (comma list in `A2A_PERMISSION_RULES`)',
    )


@dataclass(frozen=True)
class Rule:
    action: str  # allow | deny | ask
    pattern: str  # fnmatch-style glob on the tool name, case-sensitive

    def __str__(self) -> str:
        return f"{self.action}:{self.pattern}"


@dataclass(frozen=True)
class AutoDecision:
    decision: str  # allow_once or deny
    policy: str  # auto_approve or rules
    rule: str = ""  # the rule that matched (rules mode)


@dataclass(frozen=True)
class PermissionPolicy:
    mode: str = "ask"
    rules: tuple[Rule, ...] = ()

    def decide(self, tool_name: str) -> AutoDecision | None:
        """The automatic decision for a tool, or None when the caller must be asked.
        In rules mode the first matching rule wins; a tool no rule matches is denied."""
        if self.mode == "auto_approve":
            return AutoDecision(ALLOW_ONCE, "auto_approve")
        if self.mode != "rules":
            return None
        for rule in self.rules:
            if fnmatch.fnmatchcase(tool_name, rule.pattern):
                decision = RULE_ACTIONS[rule.action]
                return AutoDecision(decision, "rules", str(rule)) if decision else None
        return AutoDecision(DENY, "rules", "")


ASK = PermissionPolicy()


def parse_rule(text: str) -> Rule:
    action, sep, pattern = text.strip().partition(":")
    action = action.strip().lower()
    if not sep or action not in RULE_ACTIONS or not pattern.strip():
        raise ValueError(
            f"permission_rules: {text!r} is not a rule; write ACTION:PATTERN with ACTION "
            "allow, deny or ask and a tool-name pattern (e.g. allow:read_*)"
        )
    return Rule(action, pattern.strip())


def validate_permissions(s: PermissionSettings) -> None:
    check_section(s, PermissionSettings)
    for text in s.permission_rules:
        parse_rule(text)
    if s.permission_mode == "rules" and not s.permission_rules:
        raise ValueError(
            'permission_rules: permission_mode = "rules" needs at least one rule '
            "(ACTION:PATTERN, e.g. allow:read_*); without any, every request would be denied"
        )
    if s.permission_rules and s.permission_mode != "rules":
        raise ValueError(
            f'permission_rules: only used with permission_mode = "rules" '
            f"(it is {s.permission_mode!r}); set the mode or remove the rules"
        )


def policy_from_settings(s: PermissionSettings) -> PermissionPolicy:
    return PermissionPolicy(s.permission_mode, tuple(parse_rule(r) for r in s.permission_rules))
