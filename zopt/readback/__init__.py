"""Reading a written store back: ``verify`` (compare with the source) and ``info`` (inspect)."""
