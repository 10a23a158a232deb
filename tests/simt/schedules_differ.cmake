# Runs `simt_bugs race_neighbour` under the forward and the reverse schedule; a kernel with a race
# between its threads gives a schedule-dependent result.
foreach(order forward reverse)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env EMBER_SIMT_SCHEDULE=${order} ${EXE} race_neighbour
                  OUTPUT_VARIABLE out_${order} ERROR_VARIABLE err)
  message(STATUS "${order}: ${out_${order}}")
endforeach()
if(NOT out_forward STREQUAL out_reverse)
  message(STATUS "schedules disagree: bug detected")
endif()
