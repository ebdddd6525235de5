"""The consent gate: its rules, cases, schema bounds and the state it reuses."""
