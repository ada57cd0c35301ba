// A C++ library for the demangling test: a member function of a class
// template in a namespace, called from a plain function.
namespace ns {
template <typename T> struct Box {
  __attribute__((noinline)) T *make(int n);
};
template <typename T> T *Box<T>::make(int n) { return new T[n]; }
__attribute__((noinline)) void *plain(int n) {
  Box<long> b;
  return b.make(n);
}
} // namespace ns

extern "C" void *cxx_entry(int n) { return ns::plain(n); }
