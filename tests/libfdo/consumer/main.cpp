// Registers a two-argument function with fdod through the installed fdo.hpp
// and calls it: prints "consumer ok <value> <server version>".
#include <cstdio>
#include <fdo/fdo.hpp>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer SOCKET\n");
    return 2;
  }
  try {
    fdo::api::Connection conn(argv[1], "consumer");
    fdo::api::Program p = conn.register_program("define i32 @mul_add(i32 %a, i32 %b) {\n"
                                                "  %m = mul i32 %a, %b\n"
                                                "  %r = add i32 %m, 2\n"
                                                "  ret i32 %r\n"
                                                "}\n");
    fdo_value v = conn.execute(p.id, "mul_add", {fdo::api::i32(8), fdo::api::i32(5)});
    std::printf("consumer ok %d %s\n", v.as.i32, conn.server_version().c_str());
    {
      // The same code linked into this process, called through its native
      // entry: per call (NativeEntry), and as a plain typed pointer.
      fdo::api::InProcess code(conn, p.id, {"mul_add"});
      fdo::api::NativeThread thread(code); // closed before `code`
      const std::size_t index = code.entry("mul_add");
      fdo::api::NativeEntry<std::int32_t(std::int32_t, std::int32_t)> mul_add(thread, index);
      long sum = 0;
      for (std::int32_t i = 0; i < 1000; ++i)
        sum += mul_add(i, 3);
      auto* typed = thread.entry<std::int32_t(std::int32_t, std::int32_t)>(index);
      const std::int32_t direct = typed(8, 5);
      thread.count(index, 1);
      thread.quiescent();
      const fdo_inproc_flush_result flushed = code.flush();
      std::printf("inproc ok %ld %d batches %u\n", sum, direct, flushed.batches);
    }
    try {
      conn.execute(p.id, "no_such_entry");
    } catch (const fdo::api::Error& e) {
      std::printf("error %s %lld\n", e.code_name(), static_cast<long long>(e.rpc_code()));
    }
    return 0;
  } catch (const fdo::api::Error& e) {
    std::fprintf(stderr, "consumer: %s (%s, JSON-RPC %lld)\n", e.what(), e.code_name(),
                 static_cast<long long>(e.rpc_code()));
    return 1;
  }
}
