"""CI: code that runs the product end to end; `invoke e2e` imports it, so it is not under tests/."""
