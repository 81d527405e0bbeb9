"""Entry points a trial process starts through: ``launch`` (resolve and run the experiment's
entrypoint), ``harness`` (run a ``module:Class`` PyTorchTrial), and ``pid_server`` /
``pid_client`` (stop every worker of a trial when one of them dies)."""
