"""Real-browser tests: JupyterLab driven by Playwright in Debian's chromium."""
