"""Development infrastructure, outside the layers: the embedded PostgreSQL (the demo's, the tests'
and a database-less start's), PgBouncer's and Redis's throwaway local setups, and the cluster of
network namespaces with its fault drill. Nothing in the layers imports it (import-linter: "The layers
never import the development tools"); it reads ``config.db_roles`` for the roles it creates, and the
settings read the embedded server's address from it when ``DATABASE_URL`` is unset."""
