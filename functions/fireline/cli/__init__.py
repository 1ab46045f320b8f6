"""The operator CLI: ``fireline schedules|jobs|dead-letters ...`` over the HTTP API.

``client`` speaks HTTP (standard library only) and turns error answers into typed
exceptions; ``main`` parses the command line, calls one route and renders the answer.
"""
