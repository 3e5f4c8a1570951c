// manylinux_2_28 from a newer build host (docs/decisions.md, "manylinux tag").
//
// Linked into every library of the wheel (CMakeLists.txt, jaxwarp_manylinux_compat),
// never compiled at run time. Built on glibc >= 2.34 and GCC >= 11, the libraries
// would ask for:
// - glibc 2.34's versions of the pthread, dl*, sem_* and shm_* functions that glibc
//   2.34 moved into libc.so.6. CUDA's static runtime (libcudart_static.a) calls them
//   unversioned, so the linker binds them to the newest version (GLIBC_2.34).
//   Each is bound here to its old version instead (GLIBC_2.2.5, dlmopen
//   GLIBC_2.3.4), which every glibc since 2.2.5 exports: the same function in
//   libc.so.6 on glibc >= 2.34, in libpthread.so.0, libdl.so.2 or librt.so.1 (which
//   the libraries name as needed) on older ones.
// - two libstdc++ functions newer than GCC 8's (GLIBCXX_3.4.24, manylinux_2_28's
//   limit), both called from inline code of the headers (std::allocator,
//   XLA's FFI api.h): defined here the way GCC 8's headers spell them.
// `ld --wrap=S` sends the libraries' calls of S to __wrap_S below; CMakeLists.txt
// reads the symbol names from the JW_OLD_GLIBC and JW_WRAP lines of this file, so
// the list lives here only. x86-64 Linux only. .ci/wheel_check fails when a new
// CUDA or compiler release asks for a symbol this file does not cover.
#include <ios>
#include <new>
#include <sstream>

// __wrap_<sym>: a hidden jump to <sym>@<version> of the C library.
#define JW_OLD_GLIBC(sym, ver)                                             \
  __asm__(".text\n"                                                        \
          ".globl __wrap_" #sym "\n"                                       \
          ".hidden __wrap_" #sym "\n"                                      \
          ".type __wrap_" #sym ", @function\n"                             \
          "__wrap_" #sym ":\n"                                             \
          "  jmp __jw_glibc_" #sym "@PLT\n"                                \
          ".size __wrap_" #sym ", . - __wrap_" #sym "\n"                   \
          ".symver __jw_glibc_" #sym ", " #sym "@" #ver "\n");

JW_OLD_GLIBC(dlclose, GLIBC_2.2.5)
JW_OLD_GLIBC(dlerror, GLIBC_2.2.5)
JW_OLD_GLIBC(dlmopen, GLIBC_2.3.4)
JW_OLD_GLIBC(dlopen, GLIBC_2.2.5)
JW_OLD_GLIBC(dlsym, GLIBC_2.2.5)
JW_OLD_GLIBC(dlvsym, GLIBC_2.2.5)
JW_OLD_GLIBC(pthread_condattr_setpshared, GLIBC_2.2.5)
JW_OLD_GLIBC(pthread_create, GLIBC_2.2.5)
JW_OLD_GLIBC(pthread_detach, GLIBC_2.2.5)
JW_OLD_GLIBC(pthread_getspecific, GLIBC_2.2.5)
JW_OLD_GLIBC(pthread_join, GLIBC_2.2.5)
JW_OLD_GLIBC(pthread_key_create, GLIBC_2.2.5)
JW_OLD_GLIBC(pthread_key_delete, GLIBC_2.2.5)
JW_OLD_GLIBC(pthread_kill, GLIBC_2.2.5)
JW_OLD_GLIBC(pthread_mutex_trylock, GLIBC_2.2.5)
JW_OLD_GLIBC(pthread_mutexattr_destroy, GLIBC_2.2.5)
JW_OLD_GLIBC(pthread_mutexattr_init, GLIBC_2.2.5)
JW_OLD_GLIBC(pthread_mutexattr_setpshared, GLIBC_2.2.5)
JW_OLD_GLIBC(pthread_mutexattr_settype, GLIBC_2.2.5)
JW_OLD_GLIBC(pthread_once, GLIBC_2.2.5)
JW_OLD_GLIBC(pthread_rwlock_destroy, GLIBC_2.2.5)
JW_OLD_GLIBC(pthread_rwlock_init, GLIBC_2.2.5)
JW_OLD_GLIBC(pthread_rwlock_rdlock, GLIBC_2.2.5)
JW_OLD_GLIBC(pthread_rwlock_timedrdlock, GLIBC_2.2.5)
JW_OLD_GLIBC(pthread_rwlock_timedwrlock, GLIBC_2.2.5)
JW_OLD_GLIBC(pthread_rwlock_tryrdlock, GLIBC_2.2.5)
JW_OLD_GLIBC(pthread_rwlock_trywrlock, GLIBC_2.2.5)
JW_OLD_GLIBC(pthread_rwlock_unlock, GLIBC_2.2.5)
JW_OLD_GLIBC(pthread_rwlock_wrlock, GLIBC_2.2.5)
JW_OLD_GLIBC(pthread_rwlockattr_destroy, GLIBC_2.2.5)
JW_OLD_GLIBC(pthread_rwlockattr_init, GLIBC_2.2.5)
JW_OLD_GLIBC(pthread_rwlockattr_setpshared, GLIBC_2.2.5)
JW_OLD_GLIBC(pthread_setspecific, GLIBC_2.2.5)
JW_OLD_GLIBC(pthread_spin_destroy, GLIBC_2.2.5)
JW_OLD_GLIBC(pthread_spin_init, GLIBC_2.2.5)
JW_OLD_GLIBC(pthread_spin_lock, GLIBC_2.2.5)
JW_OLD_GLIBC(pthread_spin_trylock, GLIBC_2.2.5)
JW_OLD_GLIBC(pthread_spin_unlock, GLIBC_2.2.5)
JW_OLD_GLIBC(sem_destroy, GLIBC_2.2.5)
JW_OLD_GLIBC(sem_init, GLIBC_2.2.5)
JW_OLD_GLIBC(sem_post, GLIBC_2.2.5)
JW_OLD_GLIBC(sem_timedwait, GLIBC_2.2.5)
JW_OLD_GLIBC(sem_trywait, GLIBC_2.2.5)
JW_OLD_GLIBC(sem_wait, GLIBC_2.2.5)
JW_OLD_GLIBC(shm_open, GLIBC_2.2.5)
JW_OLD_GLIBC(shm_unlink, GLIBC_2.2.5)

// libstdc++ (GLIBCXX_3.4.29): std::__throw_bad_array_new_length(), called by
// std::allocator<T>::allocate in GCC >= 11's headers.
// JW_WRAP(_ZSt28__throw_bad_array_new_lengthv)
extern "C" [[noreturn]] __attribute__((visibility("hidden"))) void
__wrap__ZSt28__throw_bad_array_new_lengthv() {
  throw std::bad_array_new_length();
}

// libstdc++ (GLIBCXX_3.4.26): std::stringstream's default constructor, used by
// XLA's FFI api.h; GCC 8 spells it as the constructor taking in | out, which is
// what the default constructor does.
// JW_WRAP(_ZNSt7__cxx1118basic_stringstreamIcSt11char_traitsIcESaIcEEC1Ev)
extern "C" __attribute__((visibility("hidden"))) void
__wrap__ZNSt7__cxx1118basic_stringstreamIcSt11char_traitsIcESaIcEEC1Ev(void* self) {
  new (self) std::stringstream(std::ios_base::in | std::ios_base::out);
}
