"""Agents by name (`config.agent_name`): `agents['acfql']` (QC, QC-FQL, BFN, FQL and their n-step
variants) and `agents['acrlpd']` (RLPD, RLPD-AC, QC-RLPD)."""

from agents.acfql import ACFQLAgent
from agents.acrlpd import ACRLPDAgent

agents = {"acfql": ACFQLAgent, "acrlpd": ACRLPDAgent}
