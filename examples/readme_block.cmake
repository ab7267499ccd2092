# Writes the first ```LANG block after the heading "## HEADING" of README
# to OUT, rewriting OUT only when the block changed (so that what is built
# from it is rebuilt only then):
#
#   cmake -DREADME=README.md "-DHEADING=C++ in ten lines" -DLANG=cpp
#         -DOUT=readme_loop.cc -P readme_block.cmake
file(READ "${README}" text)
string(FIND "${text}" "\n## ${HEADING}\n" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${README}: no heading \"## ${HEADING}\"")
endif()
string(SUBSTRING "${text}" ${at} -1 text)
set(fence "\n```${LANG}\n")
string(FIND "${text}" "${fence}" start)
if(start EQUAL -1)
  message(FATAL_ERROR "${README}: no ```${LANG} block after \"## ${HEADING}\"")
endif()
string(LENGTH "${fence}" fence_length)
math(EXPR start "${start} + ${fence_length}")
string(SUBSTRING "${text}" ${start} -1 text)
string(FIND "${text}" "\n```" end)
string(SUBSTRING "${text}" 0 ${end} block)
file(WRITE "${OUT}.new" "${block}\n")
file(COPY_FILE "${OUT}.new" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.new")
