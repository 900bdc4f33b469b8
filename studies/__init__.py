"""The studies: each experiment's driver, its regenerating command and its results, one folder
per study (``studies/README.md`` lists them). Not part of the installed package: a driver puts
the repository root on ``sys.path`` and imports ``shardlab`` and ``studies.<name>`` from there;
``shardlab`` never imports ``studies``."""
