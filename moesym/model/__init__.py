"""Layer and step models composed from cost terms."""
