"""The operator's web pages (server-rendered Jinja2, autoescaped; no build step, no network assets)."""
