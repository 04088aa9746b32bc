"""Reading the files moesym ships and takes (TOML with clear errors, the data folders) and the terminal progress bar."""
