"""placeholder during development"""
from agentuq_nb.llm.local_provider import LOCAL_MODEL, register

register()
