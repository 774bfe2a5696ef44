# "splice+read/write": splice(2) through a pipe, except a read/write loop from an AF_UNIX stream
# socket to a TCP socket (faster there) and where the kernel refuses to splice.
METHOD: str

def pump(src_fd: int, dst_fd: int) -> int: ...
