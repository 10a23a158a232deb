# `ember export` is optional at configure time, run by ctest as `cmake:onnx_optional`:
#   cmake -DSOURCE_DIR=... -DWORK_DIR=... -P onnx_optional.cmake
#  - with protobuf and libonnx (scripts/install-deps.sh installs them) the summary line lists them;
#  - without protobuf, or without ONNX, the configure still succeeds and says that `ember export`
#    is built without ONNX support (the command then says so too: apps/ember/export_command.cpp).
file(REMOVE_RECURSE ${WORK_DIR})
set(common -DEMBER_BUILD_TESTS=OFF -DEMBER_BUILD_EXAMPLES=OFF -DEMBER_BUILD_BENCH=OFF -DEMBER_CUDA=OFF -DEMBER_SIMT=OFF
           -DEMBER_MPI=OFF)

execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/with ${common}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "libraries: [^\n]*protobuf \\+ ONNX \\(ember export\\)")
  message(FATAL_ERROR "with protobuf and libonnx installed the summary should list 'protobuf + ONNX (ember export)' "
                      "(scripts/install-deps.sh installs libprotobuf-dev and libonnx-dev):\n${out}\n${err}")
endif()

foreach(missing Protobuf ONNX)
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/no-${missing} ${common}
                          -DCMAKE_DISABLE_FIND_PACKAGE_${missing}=ON
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "`ember export` is built without ONNX support" OR out MATCHES "\\+ ONNX")
    message(FATAL_ERROR "without ${missing} the configure should succeed and say `ember export` has no ONNX "
                        "support:\n${out}\n${err}")
  endif()
endforeach()
