"""Real-browser tests (JupyterLab in headless Debian Chromium); a package so its conftest has its own module name."""
