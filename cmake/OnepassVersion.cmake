# The one version source is project(VERSION) in the top CMakeLists.txt. This writes
# include/onepass/version.h into the build tree with that version, the git commit of the
# checkout at configure time ("unknown" outside one) and the backends of this build.
find_package(Git QUIET)
set(ONEPASS_GIT_COMMIT "unknown")
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --short HEAD
                  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                  OUTPUT_VARIABLE onepass_git_commit OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE onepass_git_result ERROR_QUIET)
  if(onepass_git_result EQUAL 0 AND onepass_git_commit)
    set(ONEPASS_GIT_COMMIT ${onepass_git_commit})
    # Reconfigure when HEAD moves (a checkout) or its branch does (a commit), so the
    # commit stays current; a file missing now (packed refs, detached HEAD) is skipped.
    execute_process(COMMAND ${GIT_EXECUTABLE} symbolic-ref -q HEAD
                    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                    OUTPUT_VARIABLE onepass_git_branch OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    foreach(ref IN ITEMS HEAD ${onepass_git_branch})
      execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --path-format=absolute --git-path ${ref}
                      WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                      OUTPUT_VARIABLE ref_file OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
      if(ref_file AND EXISTS "${ref_file}")
        set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
                     ${ref_file})
      endif()
    endforeach()
  endif()
endif()

set(ONEPASS_BACKENDS "cpu")
if(ONEPASS_CUDA)
  string(APPEND ONEPASS_BACKENDS ", cuda")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/version.h.in
               ${PROJECT_BINARY_DIR}/include/onepass/version.h @ONLY)
