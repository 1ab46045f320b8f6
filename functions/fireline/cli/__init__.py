"""The operator CLI: ``fireline schedules|jobs|dead-letters|workflows|runs ...`` over the
HTTP API, and ``fireline admin`` (with AWS credentials) beside it.

``client`` speaks HTTP (standard library only) and turns error answers into typed
exceptions; ``main`` builds the parser and reports errors; ``schedules``, ``jobs`` and
``workflows`` hold the commands of each area, ``spec`` the options of what a job runs,
``common`` what every command shares, ``completion`` the shell completion script.
"""
