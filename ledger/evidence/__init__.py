"""Evidence that holds outside the database: a Merkle tree over the log (RFC 9162), signed checkpoints."""
