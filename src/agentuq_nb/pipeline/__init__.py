"""Run-level steps (extract → aggregate → evaluate) and papermill studies (``reproduce``)."""
