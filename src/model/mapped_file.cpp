#include "onepass/model/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "onepass/core/error.h"

namespace onepass::model {
namespace {

// Closes the descriptor on every path out of the constructor; the mapping outlives it.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::string_view file_kind(unsigned mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "a special file";
}

void require_regular_file(const std::filesystem::path& path, std::string_view where) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    const int err = errno;
    fail(where, "cannot open '", path.string(), "': ", std::strerror(err));
  }
  check(S_ISREG(info.st_mode), where, "'", path.string(), "' is ", file_kind(info.st_mode),
        ", expected a regular file");
}

MappedFile::MappedFile(const std::filesystem::path& path) : path_(path) {
  // Checked before opening: opening a FIFO blocks until a writer appears, and opening a
  // device may act on it. O_NONBLOCK covers a file swapped for a FIFO in between.
  require_regular_file(path, "mapped_file");
  FdGuard guard{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (guard.fd < 0) {
    const int err = errno;
    fail("mapped_file", "cannot open '", path.string(), "': ", std::strerror(err));
  }
  struct stat info {};
  if (::fstat(guard.fd, &info) != 0) {
    const int err = errno;
    fail("mapped_file", "cannot stat '", path.string(), "': ", std::strerror(err));
  }
  check(S_ISREG(info.st_mode), "mapped_file", "'", path.string(), "' is ",
        file_kind(info.st_mode), ", expected a regular file");
  size_ = static_cast<size_t>(info.st_size);
  if (size_ == 0) return;  // mmap rejects zero-length mappings; an empty file is {nullptr, 0}
  void* mapped = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, guard.fd, 0);
  if (mapped == MAP_FAILED) {
    const int err = errno;
    size_ = 0;
    fail("mapped_file", "cannot map '", path.string(), "' (", info.st_size,
         " bytes): ", std::strerror(err));
  }
  data_ = static_cast<const uint8_t*>(mapped);
}

MappedFile::~MappedFile() {
  release();
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      path_(std::move(other.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    path_ = std::move(other.path_);
  }
  return *this;
}

namespace {

// Advice only: a failure leaves the pages resident, which is still correct.
void dont_need(uintptr_t first, uintptr_t end) noexcept {
  if (first != 0 && end > first)
    (void)::madvise(reinterpret_cast<void*>(first), end - first, MADV_DONTNEED);
}

uintptr_t page_size() noexcept {
  static const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

}  // namespace

void MappedFile::release_pages(const void* begin, size_t bytes) noexcept {
  const uintptr_t page = page_size();
  const auto start = reinterpret_cast<uintptr_t>(begin);
  if (begin == nullptr) return;
  // The pages wholly inside the range: the ones at its ends may hold another tensor's bytes.
  dont_need((start + page - 1) / page * page, (start + bytes) / page * page);
}

void MappedFile::release_pages_touching(const void* begin, size_t bytes) noexcept {
  const uintptr_t page = page_size();
  const auto start = reinterpret_cast<uintptr_t>(begin);
  if (begin == nullptr || bytes == 0) return;
  // The mapping starts on a page and its last page is mapped whole, so this stays inside it.
  dont_need(start / page * page, (start + bytes + page - 1) / page * page);
}

void MappedFile::release() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace onepass::model
