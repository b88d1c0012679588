"""Turns: prompt assembly (context.py); the turn runner arrives with the coordinator."""
