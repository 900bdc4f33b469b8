"""Study: tables larger than a device -- row-wise plans and row-wise comm (``README.md``)."""
