"""People's data protection (issue 28): legal holds, retention policies and erasures, as events of their own
streams (docs/privacy.md)."""
