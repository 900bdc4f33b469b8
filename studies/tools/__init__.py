"""Tools that make shipped data and pictures, not studies (``README.md``)."""
