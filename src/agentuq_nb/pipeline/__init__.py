"""Studies: papermill runs of numbered notebooks per params file (``reproduce``), and the AgentUQ paper's figures (``paper``)."""
