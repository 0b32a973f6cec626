"""Failed runs turned into training environments (issue 20): redaction of personal data
(redaction, redaction_patterns) and the export consent check (consent)."""
