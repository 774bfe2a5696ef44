# The Linux system calls the compiled splice twin makes, declared `nogil` so the copy loop can run
# without the GIL (uvloop includes/system.pxd style). Python.h defines _GNU_SOURCE before these
# headers are included, which is what exposes splice(), pipe2(), F_SETPIPE_SZ and SO_DOMAIN.

cdef extern from "<errno.h>" nogil:
    int errno
    int EINTR
    int EAGAIN
    int EWOULDBLOCK
    int EINVAL
    int ENOSYS
    int ENOMEM

cdef extern from "<fcntl.h>" nogil:
    int O_CLOEXEC
    int F_SETPIPE_SZ
    int F_GETPIPE_SZ

    unsigned int SPLICE_F_MOVE
    unsigned int SPLICE_F_NONBLOCK
    unsigned int SPLICE_F_MORE

    ctypedef long long loff_t
    int fcntl(int fd, int cmd, ...)
    ssize_t splice(int fd_in, loff_t *off_in, int fd_out, loff_t *off_out,
                   size_t length, unsigned int flags)

cdef extern from "<unistd.h>" nogil:
    int pipe2(int *pipefd, int flags)
    ssize_t read(int fd, void *buf, size_t count)
    ssize_t write(int fd, const void *buf, size_t count)
    int close(int fd)

cdef extern from "<sys/stat.h>" nogil:
    struct stat:
        unsigned int st_mode
    int fstat(int fd, stat *buf)
    bint S_ISFIFO(unsigned int mode)
    bint S_ISSOCK(unsigned int mode)

cdef extern from "<sys/socket.h>" nogil:
    ctypedef unsigned int socklen_t
    int SOL_SOCKET
    int SO_RCVTIMEO
    int MSG_DONTWAIT
    int SO_DOMAIN
    int SO_TYPE
    int SO_PROTOCOL
    int AF_UNIX
    int AF_INET
    int AF_INET6
    int SOCK_STREAM
    int getsockopt(int fd, int level, int optname, void *optval, socklen_t *optlen)
    ssize_t recv(int fd, void *buf, size_t n, int flags)

cdef extern from "<sys/time.h>" nogil:
    struct timeval:
        long tv_sec
        long tv_usec

cdef extern from "<poll.h>" nogil:
    ctypedef unsigned long nfds_t
    struct pollfd:
        int fd
        short events
        short revents
    short POLLIN
    int poll(pollfd *fds, nfds_t nfds, int timeout)

cdef extern from "<netinet/in.h>" nogil:
    int IPPROTO_TCP

cdef extern from "<stdlib.h>" nogil:
    void *malloc(size_t size)
    void free(void *ptr)
