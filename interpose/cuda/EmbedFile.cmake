# cmake -DIN=file -DOUT=file.cc -P EmbedFile.cmake: the bytes of IN as dlrr::cuda::kDigestKernelImage.
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR size "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
file(WRITE "${OUT}" "// Generated from ${IN} by EmbedFile.cmake.\n#include <cstddef>\nnamespace dlrr::cuda {\n"
     "alignas(8) extern const unsigned char kDigestKernelImage[] = {\n${bytes}};\n"
     "extern const std::size_t kDigestKernelImageSize = ${size};\n}  // namespace dlrr::cuda\n")
