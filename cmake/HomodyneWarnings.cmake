# Warnings (errors when HOMODYNE_WERROR is ON, as in CI).
function(homodyne_set_warnings target)
  target_compile_options(${target} INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
      -Wconversion-null -Wno-sign-compare>)
  if(HOMODYNE_WERROR)
    target_compile_options(${target} INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
endfunction()
