"""Test text shared by the model-quality tests."""

# Boilerplate that survives extraction on real sites: the Sphinx chrome of docs.python.org, and
# the cookie / newsletter / share widgets of news and shop pages.
CHROME = [
    "Navigation", "index", "modules |", "next |", "previous |", "Python »", "3.11.2 Documentation »",
    "The Python Standard Library »", "Table of Contents", "Previous topic", "Next topic", "This Page",
    "Report a Bug", "Show Source", "Quick search", "Theme Auto Light Dark",
    "© Copyright 2001-2023, Python Software Foundation.", "Last updated on Mar 13, 2023.",
    "Found a bug?", "Created using Sphinx 4.5.0.", "Home", "About us", "Contact", "Privacy Policy",
    "Terms of Service", "Cookie settings", "Accept all cookies",
    "We use cookies to improve your experience on our website.", "Subscribe to our newsletter",
    "Sign in", "Create account", "Share on Facebook", "Tweet", "Related posts", "Read more »",
    "Best cheap laptop deals 2023 buy now free shipping", "Click here to download now!",
]
